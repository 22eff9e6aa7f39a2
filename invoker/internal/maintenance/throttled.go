package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

// throttled is a maintenance pass that does its work at the first pass, then at the
// first pass more than every after its last one, by its clock, and logs the work's error
// (a later pass retries). Not safe for concurrent use: one loop calls Pass.
type throttled struct {
	every time.Duration
	clock clock.Clock
	log   *slog.Logger
	what  string // for the log: "pruning flow-control state"
	work  func(ctx context.Context) error
	last  time.Time // when it last worked
}

// Pass does the work when every has passed since the last time it did.
func (t *throttled) Pass(ctx context.Context) {
	if t.clock.Now().Sub(t.last) <= t.every {
		return
	}
	t.last = t.clock.Now()
	if err := t.work(ctx); err != nil && ctx.Err() == nil {
		t.log.Warn(t.what+" failed; a later pass retries", slog.Any("error", err))
	}
}
