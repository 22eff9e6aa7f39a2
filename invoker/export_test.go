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

// SnoozeFor is snoozeFor of the snoozes in a job's metadata.
func SnoozeFor(metadata []byte) time.Duration { return snoozeFor(snoozesOf(metadata)) }
