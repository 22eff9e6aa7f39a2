package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// UpcomingBatch bounds the wakes (or deadlines) one pass arms timers for; past it, the
// next pass goes on from the last one armed.
const UpcomingBatch = 10000

// Upcoming arms, at each maintenance pass, this process's timers for what the runs
// have coming within its lead (two passes' worth: the invoker's wakeLead) that earlier
// passes did not arm, whichever gateway made it:
//
//   - their wake times (NewWakes), so that a run waiting for hours (a long sleep, a
//     wait's timeout) costs no memory until its wake time is near and still wakes on
//     time, without waiting for River's scheduler (which promotes a scheduled job up to
//     5 s late). With several gateways each arms them: the first claim wins, the others
//     find the run not due.
//   - the deadlines of the runs that have not ended (NewDeadlines), so that a run with a
//     deadline hours away costs no memory until it is near, and is failed on time even
//     when the gateway that created it is gone. A run still going past its deadline
//     (its timer was lost with its gateway) has its timer armed to fire at once, so it
//     is failed without waiting for its River job.
type Upcoming struct {
	read   func(ctx context.Context, db journal.DB, after time.Time, within time.Duration, limit int) ([]journal.Wake, time.Time, error)
	what   string // what a failed pass's log says could not be armed, and who keeps it
	pool   *pgxpool.Pool
	lead   time.Duration
	armed  func(runID string) bool
	arm    func(runID string, at time.Time, d time.Duration)
	health *Health
	log    *slog.Logger
	clock  clock.Clock
	// until is how far ahead (database clock) the last pass armed timers when it found
	// a full batch, else zero.
	until time.Time
}

// NewWakes returns the Upcoming wake times of pool's runs within lead: armed reports
// whether a run's wake-up timer is armed, arm arms it to fire in d, for its wake time at
// (the database clock).
func NewWakes(pool *pgxpool.Pool, lead time.Duration, armed func(runID string) bool, arm func(runID string, at time.Time, d time.Duration),
	health *Health, log *slog.Logger, clk clock.Clock) *Upcoming {
	return &Upcoming{read: journal.UpcomingWakes, what: "arming timers for upcoming wake-ups failed; River's jobs wake those runs",
		pool: pool, lead: lead, armed: armed, arm: arm, health: health, log: log, clock: clk}
}

// NewDeadlines returns the Upcoming deadlines of pool's runs within lead: armed reports
// whether a run's deadline timer is armed, arm arms it to fire in d.
func NewDeadlines(pool *pgxpool.Pool, lead time.Duration, armed func(runID string) bool, arm func(runID string, d time.Duration),
	health *Health, log *slog.Logger, clk clock.Clock) *Upcoming {
	return &Upcoming{read: journal.UpcomingDeadlines, what: "arming timers for upcoming deadlines failed; River's jobs keep them",
		pool: pool, lead: lead, armed: armed, arm: func(runID string, _ time.Time, d time.Duration) { arm(runID, d) },
		health: health, log: log, clock: clk}
}

// Pass arms the timers of what comes within the lead (or has passed, for a deadline)
// whose timer is not armed, each to fire at its time (the database clock of the read,
// less the time since it was read on this clock). Not safe for concurrent use: one loop
// calls it.
func (u *Upcoming) Pass(ctx context.Context) {
	upcoming, now, err := u.read(ctx, u.pool, u.until, u.lead, UpcomingBatch)
	u.health.Observe(err)
	if err != nil {
		if ctx.Err() == nil {
			u.log.Warn(u.what, slog.Any("error", err))
		}
		return
	}
	read := u.clock.Now()
	for _, w := range upcoming {
		if !u.armed(w.RunID) {
			u.arm(w.RunID, w.At, w.At.Sub(now)-u.clock.Now().Sub(read))
		}
	}
	// Each pass looks again at the whole lead from its own now, not only past what the
	// last pass armed: a wake committed after that pass's snapshot was taken, though
	// within its lead (a slow commit), is then still armed. Only a full batch makes the
	// next pass go on from its last one.
	u.until = time.Time{}
	if len(upcoming) == UpcomingBatch {
		u.until = upcoming[len(upcoming)-1].At
	}
}
