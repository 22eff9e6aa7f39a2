package maintenance

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

// Maintainer makes a maintenance pass every interval on average (with jitter, so that
// gateways spread theirs: each wait is drawn from [interval/2, 3·interval/2)), on every
// gateway, no leader needed: each pass calls its passes in order (the Reaper, the
// Sweeper, Wakes, Deadlines, Statistics, the FlowPruner, OverdueTicks), one after the
// other, in one goroutine.
type Maintainer struct {
	every  time.Duration
	passes []func(context.Context)
	clock  clock.Clock
}

// NewMaintainer returns the Maintainer that calls passes every every, on average.
func NewMaintainer(every time.Duration, clk clock.Clock, passes ...func(context.Context)) *Maintainer {
	return &Maintainer{every: every, passes: passes, clock: clk}
}

// Run makes a pass after each wait until ctx ends.
func (m *Maintainer) Run(ctx context.Context) {
	for {
		if !clock.Sleep(m.clock, ctx.Done(), m.every/2+rand.N(m.every)) {
			return
		}
		for _, pass := range m.passes {
			pass(ctx)
		}
	}
}
