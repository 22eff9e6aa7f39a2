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

// Wakes arms, at each maintenance pass, this process's timers for the runs due within
// its lead (two passes' worth: the invoker's wakeLead) that earlier passes did not arm,
// whichever gateway suspended them, so that a run waiting for hours (a long sleep, a
// wait's timeout) costs no memory until its wake time is near and still wakes on time,
// without waiting for River's scheduler (which promotes a scheduled job up to 5 s late).
// With several gateways each arms them: the first claim wins, the others find the run
// not due.
type Wakes struct {
	pool   *pgxpool.Pool
	lead   time.Duration
	armed  func(runID string) bool
	arm    func(runID string, d time.Duration)
	health *Health
	log    *slog.Logger
	clock  clock.Clock
	// until is how far ahead (database clock) the last pass armed timers when it found
	// a full batch of wakes, else zero.
	until time.Time
}

// NewWakes returns the Wakes of pool's runs due within lead: armed reports whether a
// run's wake-up timer is armed, arm arms it to fire in d.
func NewWakes(pool *pgxpool.Pool, lead time.Duration, armed func(runID string) bool, arm func(runID string, d time.Duration),
	health *Health, log *slog.Logger, clk clock.Clock) *Wakes {
	return &Wakes{pool: pool, lead: lead, armed: armed, arm: arm, health: health, log: log, clock: clk}
}

// Pass arms the timers of the runs due within the lead whose timer is not armed, each
// to fire at its wake time (journal.UpcomingWakes' database clock, less the time
// since it was read on this clock). Not safe for concurrent use: one loop calls it.
func (w *Wakes) Pass(ctx context.Context) {
	wakes, now, err := journal.UpcomingWakes(ctx, w.pool, w.until, w.lead, UpcomingBatch)
	w.health.Observe(err)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("arming timers for upcoming wake-ups failed; River's jobs wake those runs", slog.Any("error", err))
		}
		return
	}
	read := w.clock.Now()
	for _, wk := range wakes {
		if !w.armed(wk.RunID) {
			w.arm(wk.RunID, wk.At.Sub(now)-w.clock.Now().Sub(read))
		}
	}
	// Each pass looks again at the whole lead from its own now, not only past what the
	// last pass armed: a wake committed after that pass's snapshot was taken, though
	// within its lead (a slow commit), is then still armed. Only a full batch makes the
	// next pass go on from its last wake.
	w.until = time.Time{}
	if len(wakes) == UpcomingBatch {
		w.until = wakes[len(wakes)-1].At
	}
}
