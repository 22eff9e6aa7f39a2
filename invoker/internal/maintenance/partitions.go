package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// PartitionsEvery is how often, at most, a gateway makes sure the journal's month
// partitions exist ahead of time, and PartitionsRetry how long it waits after a failure
// (the lock it needs was not free at once: each try may hold the journal's writers for
// up to 100 ms).
const (
	PartitionsEvery = time.Hour
	PartitionsRetry = time.Minute
)

// Partitions makes the month partitions of the journal (journal.CreateJournalPartitions)
// for the month of its clock and the journal.PartitionsAhead months after it: at the
// first maintenance pass, then at the first pass more than PartitionsEvery after the
// last success (PartitionsRetry after a failure), by its clock. A month's partition is thus made about two months before
// its first run, whatever the gateways' clocks disagree by within that; runs of a month
// without one are kept in the DEFAULT partition, from which they move into theirs when
// it is made.
type Partitions struct {
	pool  *pgxpool.Pool
	log   *slog.Logger
	clock clock.Clock
	tried time.Time     // when it last tried
	wait  time.Duration // from then until the next try
}

// NewPartitions returns the Partitions of pool's journal.
func NewPartitions(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *Partitions {
	return &Partitions{pool: pool, log: log, clock: clk}
}

// Pass makes the partitions that are missing when its wait since the last try is over,
// and logs its error (a pass PartitionsRetry later retries) or what it made. Not safe
// for concurrent use: one loop calls it.
func (p *Partitions) Pass(ctx context.Context) {
	now := p.clock.Now()
	if !p.tried.IsZero() && now.Sub(p.tried) <= p.wait {
		return
	}
	p.tried, p.wait = now, PartitionsRetry
	n, err := journal.CreateJournalPartitions(ctx, p.pool, now)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("making the journal's month partitions failed; a later pass retries", slog.Any("error", err),
				slog.Duration("retry_in", PartitionsRetry))
		}
		return
	}
	p.wait = PartitionsEvery
	if n > 0 {
		p.log.Info("made the journal's month partitions", slog.Int("partitions", n), slog.Time("for", now))
	}
}
