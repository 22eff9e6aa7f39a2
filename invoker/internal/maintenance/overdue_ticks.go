package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

// OverdueLate is how late past its time a schedule's tick is overdue for the
// OverdueTicks service, and OverdueBatch how many overdue ticks one pass handles at most.
const (
	OverdueLate  = time.Second
	OverdueBatch = 100
)

// OverdueTicks handles, at each maintenance pass, the schedules' ticks more than
// OverdueLate overdue: ticks whose gateway's timer is gone (that gateway died) and whose
// River job waits for River's leader. A tick that fails for good comes back every pass:
// its error is logged at most once a minute, by its clock.
type OverdueTicks struct {
	tick   func(ctx context.Context, late time.Duration, limit int) (int, error)
	health *Health
	log    *slog.Logger
	clock  clock.Clock
	logged time.Time // when it last logged a failed overdue tick
}

// NewOverdueTicks returns the OverdueTicks service that handles ticks with tick: it
// handles the next tick of each schedule more than late past the database clock, at most
// limit of them, and returns how many it handled and the errors of those it could not
// (the invoker's Schedules.TickOverdue).
func NewOverdueTicks(tick func(ctx context.Context, late time.Duration, limit int) (int, error), health *Health, log *slog.Logger, clk clock.Clock) *OverdueTicks {
	return &OverdueTicks{tick: tick, health: health, log: log, clock: clk}
}

// Pass handles up to OverdueBatch ticks more than OverdueLate overdue. Not safe for
// concurrent use: one loop calls it.
func (o *OverdueTicks) Pass(ctx context.Context) {
	_, err := o.tick(ctx, OverdueLate, OverdueBatch)
	o.health.Observe(err)
	if err != nil && ctx.Err() == nil && o.clock.Now().Sub(o.logged) > time.Minute {
		o.logged = o.clock.Now()
		o.log.Warn("handling overdue schedule ticks failed; the next passes retry", slog.Any("error", err))
	}
}
