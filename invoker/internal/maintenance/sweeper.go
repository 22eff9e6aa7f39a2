package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal"
)

// SweepExamine bounds the due runs one sweep looks at, and SweepBatch the runs it
// enqueues.
const (
	SweepExamine = 1000
	SweepBatch   = 500
)

// Sweeper enqueues, at each maintenance pass, a job for each stranded run: due for
// longer than its grace with no live job (deleted, discarded, or fetched by a gateway
// that died: see journal.StrandedRuns), in the transaction that finds it, so that
// nothing due waits for River's leader.
type Sweeper struct {
	pool    *pgxpool.Pool
	enqueue EnqueueFunc
	grace   time.Duration
	health  *Health
	log     *slog.Logger
}

// NewSweeper returns the Sweeper of pool's runs stranded for longer than grace, which
// enqueues with enqueue.
func NewSweeper(pool *pgxpool.Pool, enqueue EnqueueFunc, grace time.Duration, health *Health, log *slog.Logger) *Sweeper {
	return &Sweeper{pool: pool, enqueue: enqueue, grace: grace, health: health, log: log}
}

// Pass enqueues a job for each stranded run, at most SweepBatch of the SweepExamine runs
// due the longest, and logs how many, or its error (the next pass retries).
func (s *Sweeper) Pass(ctx context.Context) {
	ids, err := Requeue(ctx, s.pool, s.enqueue, func(tx pgx.Tx) ([]string, error) {
		return journal.StrandedRuns(ctx, tx, s.grace, SweepExamine, SweepBatch)
	})
	s.health.Observe(err)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("sweeping stranded runs failed; the next pass retries", slog.Any("error", err))
	} else if n := len(ids); n > 0 {
		s.log.Warn("enqueued runs that were due with no live job (deleted, discarded, or fetched by a gateway that died)", slog.Int("runs", n))
	}
}
