package invoker

import (
	"time"

	"github.com/stepgate/stepgate/journal"
)

// Due exposes to the tests the ticks that start runs when the ticks from at to clock
// are handled at clock, and whether some were missed or dropped.
func (c *Cron) Due(at, clock time.Time, policy journal.Catchup, window time.Duration) (ticks []time.Time, missed, dropped bool) {
	d := c.due(at, clock, policy, window)
	return d.ticks, d.missed, d.dropped
}

// TimerArmed reports whether this process has a wake-up timer armed for runID.
func (inv *Invoker) TimerArmed(runID string) bool { return inv.timers.has(runTimer(runID)) }

// DeadlineTimerArmed reports whether this process has a timer armed for runID's deadline.
func (inv *Invoker) DeadlineTimerArmed(runID string) bool {
	return inv.timers.has(deadlineTimer(runID))
}

// FairShare exposes the fair share of River's workers to the tests.
type FairShare = fairShare

// NewFairShare is newFairShare.
func NewFairShare(workers, reserve int) *FairShare { return newFairShare(workers, reserve) }

func (f *fairShare) Acquire(tenant string) bool { return f.acquire(tenant) }
func (f *fairShare) Release(tenant string)      { f.release(tenant) }
func (f *fairShare) Reserve() int               { return f.reserve }

// SnoozeFor is snoozeFor of the snoozes in a job's metadata.
func SnoozeFor(metadata []byte) time.Duration { return snoozeFor(snoozesOf(metadata)) }
