package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal"
)

// ReapBatch bounds the runs one statement of the Reaper recovers.
const ReapBatch = 500

// Reaper recovers the runs whose lease lapsed (their gateway died, or lost the database
// for longer than the lease: journal.ReapExpiredLeases) and enqueues their jobs, a batch
// of ReapBatch per transaction, at each maintenance pass. At start, it reaps no lease
// until it has reached the database for two renewal intervals (Health), and after it
// could not reach it, for a lease TTL (below): the other gateways, cut off too, renew
// their leases first, so a database restart costs no recovery.
//
// A database that hangs (a stopped primary, a cut link) answers late rather than not at
// all, and a statement sent before the hang runs when it ends, judging leases by a
// clock that went on while no one could renew them. So a batch whose statement did not
// answer within stallAfter of the pass's start is rolled back, reaping nothing (its
// transaction's COMMIT is sent only after that check), and Health notes the stall. And
// after an outage (not at start) it reaps nothing until the database has answered for
// stallAfter and two renewal intervals more (the lease TTL, as the invoker sets them):
// reconnecting to a database that hung takes the other gateways longer than a renewal
// interval, and a gateway that could not renew for a whole TTL while the database
// answered is taken for dead, as a lease says.
type Reaper struct {
	pool       *pgxpool.Pool
	enqueue    EnqueueFunc
	renewEvery time.Duration
	stallAfter time.Duration
	health     *Health
	log        *slog.Logger
}

// NewReaper returns the Reaper of pool's runs, which enqueues with enqueue, waits for
// health to be steady for two renewEvery before it reaps, and reaps nothing from a
// statement that answered later than stallAfter.
func NewReaper(pool *pgxpool.Pool, enqueue EnqueueFunc, renewEvery, stallAfter time.Duration, health *Health, log *slog.Logger) *Reaper {
	return &Reaper{pool: pool, enqueue: enqueue, renewEvery: renewEvery, stallAfter: stallAfter, health: health, log: log}
}

// Pass recovers every run whose lease lapsed, unless the database was unreachable
// within two renewal intervals of the start, or, after an outage, within the lease TTL
// (see Reaper), and logs how many it recovered, or its error (the next
// pass retries).
func (r *Reaper) Pass(ctx context.Context) {
	if !r.health.SteadySince(2*r.renewEvery, r.stallAfter+2*r.renewEvery) {
		return
	}
	n, err := r.reap(ctx)
	r.health.Observe(err)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("recovering runs with expired leases failed; the next pass retries", slog.Any("error", err))
	} else if n > 0 {
		r.log.Warn("recovered runs whose gateway stopped renewing their lease", slog.Int("runs", n))
	}
}

// reap recovers runs whose lease lapsed and enqueues their jobs, a batch per
// transaction, and returns how many.
func (r *Reaper) reap(ctx context.Context) (int, error) {
	total := 0
	for {
		start := time.Now()
		ids, err := Requeue(ctx, r.pool, r.enqueue, func(tx pgx.Tx) ([]string, error) {
			ids, err := journal.ReapExpiredLeases(ctx, tx, ReapBatch)
			if err == nil && time.Since(start) > r.stallAfter {
				return nil, fmt.Errorf("%w: the reap took %s, past %s: rolled back", ErrStalled, time.Since(start).Round(time.Millisecond), r.stallAfter)
			}
			return ids, err
		})
		total += len(ids)
		if err != nil || len(ids) < ReapBatch {
			return total, err
		}
	}
}
