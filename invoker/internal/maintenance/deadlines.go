package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// Deadlines arms, at each maintenance pass, this process's timers for the deadlines
// within its lead (the invoker's wakeLead) of the runs that have not ended, whichever
// gateway created the runs: as Wakes does for wake times, so that a run with a deadline
// hours away costs no memory until it is near, and is failed on time even when the
// gateway that created it is gone. A run still going past its deadline (its timer was
// lost with its gateway) has its timer armed to fire at once, so it is failed without
// waiting for its River job.
type Deadlines struct {
	pool   *pgxpool.Pool
	lead   time.Duration
	armed  func(runID string) bool
	arm    func(runID string, d time.Duration)
	health *Health
	log    *slog.Logger
	clock  clock.Clock
	// until is Wakes.until's counterpart for the runs' deadlines.
	until time.Time
}

// NewDeadlines returns the Deadlines of pool's runs within lead: armed reports whether
// a run's deadline timer is armed, arm arms it to fire in d.
func NewDeadlines(pool *pgxpool.Pool, lead time.Duration, armed func(runID string) bool, arm func(runID string, d time.Duration),
	health *Health, log *slog.Logger, clk clock.Clock) *Deadlines {
	return &Deadlines{pool: pool, lead: lead, armed: armed, arm: arm, health: health, log: log, clock: clk}
}

// Pass arms the deadline timers of the runs whose deadline is within the lead (or
// passed) and whose timer is not armed, each to fire at its deadline
// (journal.UpcomingDeadlines' database clock, less the time since it was read on this
// clock). Not safe for concurrent use: one loop calls it.
func (d *Deadlines) Pass(ctx context.Context) {
	deadlines, now, err := journal.UpcomingDeadlines(ctx, d.pool, d.until, d.lead, UpcomingBatch)
	d.health.Observe(err)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("arming timers for upcoming deadlines failed; River's jobs keep them", slog.Any("error", err))
		}
		return
	}
	read := d.clock.Now()
	for _, w := range deadlines {
		if !d.armed(w.RunID) {
			d.arm(w.RunID, w.At.Sub(now)-d.clock.Now().Sub(read))
		}
	}
	// As in Wakes: only a full batch makes the next pass go on from its last one.
	d.until = time.Time{}
	if len(deadlines) == UpcomingBatch {
		d.until = deadlines[len(deadlines)-1].At
	}
}
