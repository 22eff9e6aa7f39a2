package invoker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// Crash recovery rests on heartbeat leases. An invocation owns its run through a lease
// that lasts LeaseTTL (a few seconds) from its last renewal, whatever the function's
// timeout. Every RenewInterval this process renews, in one statement, the leases of all
// its invocations in flight (maintenance.Renewer); an invocation whose lease it could
// not renew (another gateway recovered the run) is abandoned, as its answer would be
// refused. When a gateway dies, its leases lapse within LeaseTTL, and the first gateway
// whose maintenance pass comes next (every MaintainInterval, on every gateway: no leader
// needed; maintenance.Maintainer) requeues those runs as recoveries
// (maintenance.Reaper). So a dead gateway's runs move again within LeaseTTL +
// MaintainInterval. The function's timeout bounds one invocation; it no longer decides
// when a crash is noticed.
//
// A maintenance pass also finds stranded runs (due, with no live job: see
// journal.StrandedRuns; maintenance.Sweeper) and schedules' overdue ticks
// (maintenance.OverdueTicks), so nothing due waits for River's leader. After this
// process could not reach the database, it reaps no lease until it has reached it for
// a lease TTL (two renewal intervals after its own start; maintenance.Health and
// maintenance.Reaper): the other gateways, cut off too, renew their leases first, so a
// database restart, or a hang, costs no recovery. The services are wired
// in maintenance.go.

// inflightCall is one invocation from this process: its run's lease and the cancel of
// its call to the function.
type inflightCall struct {
	lease  journal.Lease
	cancel context.CancelCauseFunc
	// seq is the highest seq this process checkpointed for the invocation, for the
	// steps-per-run metric.
	seq atomic.Int64
	// span is the invocation's span context, the parent of its checkpoints' spans;
	// invalid when traces are off. Set before the call is made.
	span trace.SpanContext
}

// errLeaseLost is the cause of an invocation's context when its lease could not be
// renewed: another gateway recovered the run. errHandedOver when this process, stopping,
// released the lease for another gateway to take.
var (
	errLeaseLost  = errors.New("invoker: the invocation's lease was lost to another gateway")
	errHandedOver = errors.New("invoker: the gateway stopped and handed the invocation over")
)

// track registers an invocation of runID until the returned func is called: its lease
// is renewed meanwhile, and cancelled, a lost lease or a hand-over cancel it.
func (inv *Invoker) track(lease journal.Lease, cancel context.CancelCauseFunc) (*inflightCall, func()) {
	c := &inflightCall{lease: lease, cancel: cancel}
	inv.inflightMu.Lock()
	set := inv.inflight[lease.RunID]
	if set == nil {
		set = map[*inflightCall]struct{}{}
		inv.inflight[lease.RunID] = set
	}
	set[c] = struct{}{}
	inv.inflightN++
	inv.inflightMu.Unlock()
	return c, func() {
		inv.inflightMu.Lock()
		delete(set, c)
		if len(set) == 0 {
			delete(inv.inflight, lease.RunID)
		}
		inv.inflightN--
		if inv.inflightN == 0 && inv.idle != nil {
			close(inv.idle)
			inv.idle = nil
		}
		inv.inflightMu.Unlock()
	}
}

// checkpointed notes that invocation of runID, in flight here, checkpointed seq, and
// returns the invocation's span context (invalid when it is not in flight here or
// traces are off).
func (inv *Invoker) checkpointed(runID string, invocation, seq int) trace.SpanContext {
	inv.inflightMu.Lock()
	defer inv.inflightMu.Unlock()
	var span trace.SpanContext
	for c := range inv.inflight[runID] {
		if c.lease.Invocation == invocation {
			span = c.span
			if int64(seq) > c.seq.Load() {
				c.seq.Store(int64(seq))
			}
		}
	}
	return span
}

// inFlight is Status.InFlight.
func (inv *Invoker) inFlight() int {
	inv.inflightMu.Lock()
	defer inv.inflightMu.Unlock()
	return inv.inflightN
}

// leases returns the leases of the invocations in flight, each once.
func (inv *Invoker) leases() []journal.Lease {
	inv.inflightMu.Lock()
	defer inv.inflightMu.Unlock()
	seen := make(map[journal.Lease]bool, inv.inflightN)
	out := make([]journal.Lease, 0, inv.inflightN)
	for _, set := range inv.inflight {
		for c := range set {
			if !seen[c.lease] {
				seen[c.lease] = true
				out = append(out, c.lease)
			}
		}
	}
	return out
}

// cancelCalls cancels, with cause, this process's invocations that hold one of leases.
func (inv *Invoker) cancelCalls(leases []journal.Lease, cause error) {
	inv.inflightMu.Lock()
	defer inv.inflightMu.Unlock()
	for _, l := range leases {
		for c := range inv.inflight[l.RunID] {
			if c.lease == l {
				c.cancel(cause)
			}
		}
	}
}

// whenIdle returns a channel closed once no invocation is in flight.
func (inv *Invoker) whenIdle() <-chan struct{} {
	inv.inflightMu.Lock()
	defer inv.inflightMu.Unlock()
	ch := make(chan struct{})
	if inv.inflightN == 0 {
		close(ch)
		return ch
	}
	if inv.idle == nil {
		inv.idle = make(chan struct{})
	}
	return inv.idle
}

// wakeLead is how far ahead of their wake times the maintenance passes arm local timers
// for runs (maintenance.NewWakes) and their deadlines (maintenance.NewDeadlines): two passes'
// worth, so that a wake is armed before it is due however the passes' jitter falls. A
// run that suspends with a nearer wake time is armed by the gateway that suspended it.
func (inv *Invoker) wakeLead() time.Duration { return 2 * inv.maintainEvery }

// enqueueNow inserts, in tx, a job that invokes each of runIDs as soon as possible, with
// its run's tenant and priority, read from the runs' rows in tx in one statement
// (journal.RunJobs). A run that tx does not see gets no job.
func (inv *Invoker) enqueueNow(ctx context.Context, tx pgx.Tx, runIDs []string) error {
	if len(runIDs) == 0 {
		return nil
	}
	runs, _, err := journal.RunJobs(ctx, tx, runIDs)
	if err != nil || len(runs) == 0 {
		return err
	}
	jobs := make([]river.InsertManyParams, len(runs))
	for i, r := range runs {
		jobs[i] = river.InsertManyParams{Args: runJob(r)}
	}
	if _, err := inv.river.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue %d runs: %w", len(runIDs), err)
	}
	return nil
}

// handOver releases the leases of the invocations still in flight, requeueing their runs
// (as recoveries) for another gateway to take at once, and abandons those invocations.
// It returns how many runs it handed over.
func (inv *Invoker) handOver(ctx context.Context) (int, error) {
	leases := inv.leases()
	if len(leases) == 0 {
		return 0, nil
	}
	ids, err := maintenance.Requeue(ctx, inv.pool, inv.enqueueNow, func(tx pgx.Tx) ([]string, error) {
		return journal.ReleaseLeases(ctx, tx, leases)
	})
	if err != nil {
		return 0, fmt.Errorf("hand over %d invocations: %w", len(leases), err)
	}
	// Abandon them all: a lease not released was lost or its run ended meanwhile.
	inv.cancelCalls(leases, errHandedOver)
	return len(ids), nil
}
