package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal/flow"
)

// FlowPruneEvery is how often, at most, a gateway prunes flow control's stale rows, and
// FlowPruneBatch how many rows one prune deletes at most.
const (
	FlowPruneEvery = time.Minute
	FlowPruneBatch = 1000
)

// FlowPruner deletes flow control's stale rows and wakes the held runs a freed
// concurrency slot can take (flow.PruneFlow): at the first maintenance pass, then at
// the first pass more than FlowPruneEvery after the last prune, by its clock; about once
// a minute per gateway. Its Pass logs an error (a later pass retries); it is not safe for
// concurrent use: one loop calls it.
type FlowPruner struct{ throttled }

// NewFlowPruner returns the FlowPruner of pool's flow-control state.
func NewFlowPruner(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *FlowPruner {
	return &FlowPruner{throttled{every: FlowPruneEvery, clock: clk, log: log, what: "pruning flow-control state",
		work: func(ctx context.Context) error {
			_, err := flow.PruneFlow(ctx, pool, FlowPruneBatch)
			return err
		}}}
}
