package invoker

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// newMaintenance wires the invoker's maintenance services (package maintenance, one
// type each), all on the invoker's clock and sharing one maintenance.Health: the
// Renewer of this process's leases (lease.go), and the Maintainer whose passes, every
// MaintainInterval on average, recover runs whose lease lapsed (Reaper), enqueue
// stranded runs (Sweeper), arm the timers of upcoming wake-ups (Wakes) and deadlines
// (Deadlines, deadline.go), keep the hot tables' statistics (Statistics), prune flow
// control's stale rows (FlowPruner, flow.go), fold the tenant-usage rows of ended
// database connections (UsageFolder) and handle schedules' overdue ticks
// (OverdueTicks, schedule.go). Retention is a River periodic job (retention.go).
func (inv *Invoker) newMaintenance() (*maintenance.Renewer, *maintenance.Maintainer) {
	health := maintenance.NewHealth(inv.clock) // reap nothing before the others could renew
	// A pass, or a reap, that the database held up longer than this counts as an outage:
	// a hang that short leaves every lease renewed before it valid when it ends.
	stall := max(inv.leaseTTL-2*inv.renewEvery, inv.renewEvery)
	timed := func(pass func(context.Context)) func(context.Context) { return health.Timed(stall, pass) }
	renewer := maintenance.NewRenewer(inv.pool, inv.leaseTTL, inv.renewEvery, inv.leases,
		func(lost []journal.Lease) { inv.cancelCalls(lost, errLeaseLost) }, health, inv.log, inv.clock)
	wakes := maintenance.NewWakes(inv.pool, inv.wakeLead(),
		func(runID string) bool { return inv.timers.has(runTimer(runID)) },
		func(runID string, at time.Time, d time.Duration) { inv.armWake(runID, nil, at, d, 0) }, health, inv.log, inv.clock)
	deadlines := maintenance.NewDeadlines(inv.pool, inv.wakeLead(),
		func(runID string) bool { return inv.timers.has(deadlineTimer(runID)) },
		func(runID string, d time.Duration) { inv.armDeadlineTimer(runID, d, 0) }, health, inv.log, inv.clock)
	maintainer := maintenance.NewMaintainer(inv.maintainEvery, inv.clock,
		timed(maintenance.NewReaper(inv.pool, inv.enqueueNow, inv.renewEvery, stall, health, inv.log).Pass),
		timed(maintenance.NewSweeper(inv.pool, inv.enqueueNow, inv.sweepGrace, health, inv.log).Pass),
		timed(wakes.Pass),
		timed(deadlines.Pass),
		timed(maintenance.NewStatistics(inv.pool, inv.log, inv.clock).Pass),
		timed(maintenance.NewFlowPruner(inv.pool, inv.log, inv.clock).Pass),
		timed(maintenance.NewUsageFolder(inv.pool, inv.log, inv.clock).Pass),
		timed(maintenance.NewOverdueTicks(inv.schedules.TickOverdue, health, inv.log, inv.clock).Pass),
	)
	return renewer, maintainer
}
