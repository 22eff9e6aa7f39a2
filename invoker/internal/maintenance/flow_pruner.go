package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// FlowPruneEvery is how often, at most, a gateway prunes flow control's stale rows, and
// FlowPruneBatch how many rows one prune deletes at most.
const (
	FlowPruneEvery = time.Minute
	FlowPruneBatch = 1000
)

// FlowPruner deletes flow control's stale rows and wakes the held runs a freed
// concurrency slot can take (journal.PruneFlow): at the first maintenance pass, then at
// the first pass more than FlowPruneEvery after the last prune, by its clock; about once
// a minute per gateway.
type FlowPruner struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	clock  clock.Clock
	pruned time.Time // when it last pruned
}

// NewFlowPruner returns the FlowPruner of pool's flow-control state.
func NewFlowPruner(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *FlowPruner {
	return &FlowPruner{pool: pool, log: log, clock: clk}
}

// Pass prunes up to FlowPruneBatch rows when FlowPruneEvery has passed since the last
// prune, and logs its error (a later pass retries). Not safe for concurrent use: one
// loop calls it.
func (p *FlowPruner) Pass(ctx context.Context) {
	if p.clock.Now().Sub(p.pruned) <= FlowPruneEvery {
		return
	}
	p.pruned = p.clock.Now()
	if _, err := journal.PruneFlow(ctx, p.pool, FlowPruneBatch); err != nil && ctx.Err() == nil {
		p.log.Warn("pruning flow-control state failed; a later pass retries", slog.Any("error", err))
	}
}
