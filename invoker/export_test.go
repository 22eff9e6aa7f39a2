package invoker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/journal/schedule"
)

// Due exposes to the tests the ticks that start runs when the ticks from at to clock
// are handled at clock, and whether some were missed or dropped.
func (c *Cron) Due(at, clock time.Time, policy schedule.Catchup, window time.Duration) (ticks []time.Time, missed, dropped bool) {
	d := c.due(at, clock, policy, window)
	return d.ticks, d.missed, d.dropped
}

// TimerArmed reports whether this process has a wake-up timer armed for runID.
func (inv *Invoker) TimerArmed(runID string) bool { return inv.timers.has(runTimer(runID)) }

// OnEarlyClaim has f see each claim made ahead of a sleep's end (armWake). Set it before
// any run sleeps.
func (inv *Invoker) OnEarlyClaim(f func(*journal.Claim)) { inv.earlyClaimed = f }

// DeadlineTimerArmed reports whether this process has a timer armed for runID's deadline.
func (inv *Invoker) DeadlineTimerArmed(runID string) bool {
	return inv.timers.has(deadlineTimer(runID))
}

// SnoozeFor is snoozeFor of the snoozes in a job's metadata.
func SnoozeFor(metadata []byte) time.Duration { return snoozeFor(snoozesOf(metadata)) }

// ForgetTimers drops this process's timers of runID, as a gateway restart would.
func (inv *Invoker) ForgetTimers(runID string) { inv.cancelled(runID) }

// Enqueue is enqueue: the tests enqueue a run named by id only, as a recovery does.
func (inv *Invoker) Enqueue(ctx context.Context, tx pgx.Tx, runID string) error {
	return inv.enqueue(ctx, tx, runID)
}

// River returns the invoker's River client, for the tests to insert and delete jobs.
func (inv *Invoker) River() *river.Client[pgx.Tx] { return inv.river }

// SetRerunBatchSize makes a bulk rerun's batches take n runs.
func (inv *Invoker) SetRerunBatchSize(n int) { inv.rerunBatchSize = n }

// RerunOperation does up to maxBatches batches of the rerun operation id (all when
// negative), as its River job does, and returns it as it stands.
func (inv *Invoker) RerunOperation(ctx context.Context, id string, maxBatches int) (*operation.Operation, error) {
	return inv.rerunOperation(ctx, id, maxBatches)
}

// AfterRerunBatch makes f run after each batch of a bulk rerun commits.
func (inv *Invoker) AfterRerunBatch(f func()) { inv.afterRerunBatch = f }
