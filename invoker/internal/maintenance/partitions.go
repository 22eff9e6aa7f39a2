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
// partitions exist ahead of time.
const PartitionsEvery = time.Hour

// Partitions makes the month partitions of the journal (journal.CreateJournalPartitions)
// for the month of its clock and the journal.PartitionsAhead months after it: at the
// first maintenance pass, then at the first pass more than PartitionsEvery after the
// last success, by its clock. A month's partition is thus made about two months before
// its first run, whatever the gateways' clocks disagree by within that; runs of a month
// without one are kept in the DEFAULT partition, from which they move into theirs when
// it is made.
type Partitions struct {
	pool  *pgxpool.Pool
	log   *slog.Logger
	clock clock.Clock
	made  time.Time // when it last succeeded
}

// NewPartitions returns the Partitions of pool's journal.
func NewPartitions(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *Partitions {
	return &Partitions{pool: pool, log: log, clock: clk}
}

// Pass makes the partitions that are missing when PartitionsEvery has passed since the
// last success, and logs its error (the next pass retries) or what it made. Not safe for
// concurrent use: one loop calls it.
func (p *Partitions) Pass(ctx context.Context) {
	now := p.clock.Now()
	if !p.made.IsZero() && now.Sub(p.made) <= PartitionsEvery {
		return
	}
	n, err := journal.CreateJournalPartitions(ctx, p.pool, now)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("making the journal's month partitions failed; the next pass retries", slog.Any("error", err))
		}
		return
	}
	p.made = now
	if n > 0 {
		p.log.Info("made the journal's month partitions", slog.Int("partitions", n), slog.Time("for", now))
	}
}
