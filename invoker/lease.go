package invoker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/journal"
)

// Crash recovery rests on heartbeat leases. An invocation owns its run through a lease
// that lasts LeaseTTL (a few seconds) from its last renewal, whatever the function's
// timeout. Every RenewInterval this process renews, in one statement, the leases of all
// its invocations in flight; an invocation whose lease it could not renew (another
// gateway recovered the run) is abandoned, as its answer would be refused. When a
// gateway dies, its leases lapse within LeaseTTL, and the first gateway whose
// maintenance pass comes next (every MaintainInterval, on every gateway: no leader
// needed) requeues those runs as recoveries. So a dead gateway's runs move again within
// LeaseTTL + MaintainInterval. The function's timeout bounds one invocation; it no
// longer decides when a crash is noticed.
//
// A maintenance pass also finds stranded runs (due, with no live job: see
// journal.StrandedRuns) and schedules' overdue ticks, so nothing due waits for River's
// leader. After this process could not reach the database, it reaps no lease until it
// has reached it for two renewal intervals: the other gateways, cut off too, renew their
// leases first, so a database restart costs no recovery.

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

// InFlight returns how many invocations this process has in flight.
func (inv *Invoker) InFlight() int {
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

// dbHealth tracks whether this process reaches the database, for the reaper's rule.
type dbHealth struct {
	mu       sync.Mutex
	failedAt time.Time // the last statement of a loop that failed; at start, the start
}

func (h *dbHealth) observe(err error) {
	if err != nil && journal.IsUnavailable(err) {
		h.mu.Lock()
		h.failedAt = time.Now()
		h.mu.Unlock()
	}
}

// steadyFor reports whether the database has answered for at least d.
func (h *dbHealth) steadyFor(d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Since(h.failedAt) >= d
}

// renewLoop renews the leases of this process's invocations every RenewInterval until
// ctx ends, and abandons the invocations whose lease is lost.
func (inv *Invoker) renewLoop(ctx context.Context) {
	t := time.NewTicker(inv.renewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		leases := inv.leases()
		if len(leases) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, inv.renewEvery)
		kept, err := journal.RenewLeases(rctx, inv.pool, leases, inv.leaseTTL)
		cancel()
		inv.health.observe(err)
		if err != nil {
			if ctx.Err() == nil {
				inv.log.Warn("could not renew the leases of this gateway's invocations; retrying", slog.Int("leases", len(leases)), slog.Any("error", err))
			}
			continue
		}
		if len(kept) == len(leases) {
			continue
		}
		keep := make(map[journal.Lease]bool, len(kept))
		for _, l := range kept {
			keep[l] = true
		}
		var lost []journal.Lease
		for _, l := range leases {
			if !keep[l] {
				lost = append(lost, l)
			}
		}
		inv.cancelCalls(lost, errLeaseLost)
	}
}

// maintainLoop makes a maintenance pass every MaintainInterval (with jitter, so that
// gateways spread theirs) until ctx ends: it recovers runs whose lease lapsed, enqueues
// stranded runs and handles schedules' overdue ticks.
func (inv *Invoker) maintainLoop(ctx context.Context) {
	for {
		d := inv.maintainEvery/2 + rand.N(inv.maintainEvery)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		inv.maintain(ctx)
	}
}

// reapBatch bounds the runs one statement recovers; sweepExamine the due runs one sweep
// looks at, and sweepBatch the runs it enqueues.
const (
	analyzeEvery   = 10 * time.Second
	flowPruneEvery = time.Minute
	flowPruneBatch = 1000
	overdueTick    = time.Second
	overdueBatch   = 100
	reapBatch      = 500
	sweepExamine   = 1000
	sweepBatch     = 500
)

// maintain makes one maintenance pass; see maintainLoop.
func (inv *Invoker) maintain(ctx context.Context) {
	if inv.health.steadyFor(2 * inv.renewEvery) {
		n, err := inv.reap(ctx)
		inv.health.observe(err)
		if err != nil && ctx.Err() == nil {
			inv.log.Warn("recovering runs with expired leases failed; the next pass retries", slog.Any("error", err))
		} else if n > 0 {
			inv.log.Warn("recovered runs whose gateway stopped renewing their lease", slog.Int("runs", n))
		}
	}
	n, err := inv.sweep(ctx)
	inv.health.observe(err)
	if err != nil && ctx.Err() == nil {
		inv.log.Warn("sweeping stranded runs failed; the next pass retries", slog.Any("error", err))
	} else if n > 0 {
		inv.log.Warn("enqueued runs that were due with no live job (deleted, discarded, or fetched by a gateway that died)", slog.Int("runs", n))
	}
	inv.health.observe(inv.armUpcoming(ctx))
	inv.health.observe(inv.armUpcomingDeadlines(ctx))
	if time.Since(inv.grownChecked) > analyzeEvery {
		// Statistics that keep up with a new database's growth; see journal.AnalyzeGrown.
		inv.grownChecked = time.Now()
		if _, err := journal.AnalyzeGrown(ctx, inv.pool); err != nil && ctx.Err() == nil {
			inv.log.Warn("analyzing grown tables failed; a later pass retries", slog.Any("error", err))
		}
	}
	if time.Since(inv.flowPruned) > flowPruneEvery {
		// Flow control's stale rows, about once a minute per gateway.
		inv.flowPruned = time.Now()
		if _, err := journal.PruneFlow(ctx, inv.pool, flowPruneBatch); err != nil && ctx.Err() == nil {
			inv.log.Warn("pruning flow-control state failed; a later pass retries", slog.Any("error", err))
		}
	}
	// Ticks whose gateway's timer is gone (that gateway died) and whose River job waits
	// for River's leader.
	_, err = inv.TickOverdue(ctx, overdueTick, overdueBatch)
	inv.health.observe(err)
	if err != nil && ctx.Err() == nil && time.Since(inv.tickErrLogged) > time.Minute {
		// A tick that fails for good comes back every pass: say so once a minute.
		inv.tickErrLogged = time.Now()
		inv.log.Warn("handling overdue schedule ticks failed; the next passes retry", slog.Any("error", err))
	}
}

// upcomingBatch bounds the wakes one pass arms timers for; past it, the next pass goes
// on from the last one armed.
const upcomingBatch = 10000

// wakeLead is how far ahead of their wake times the maintenance passes arm local timers
// for runs: two passes' worth, so that a wake is armed before it is due however the
// passes' jitter falls. A run that suspends with a nearer wake time is armed by the
// gateway that suspended it.
func (inv *Invoker) wakeLead() time.Duration { return 2 * inv.maintainEvery }

// armUpcoming arms this process's timers for the runs due within wakeLead that earlier
// passes did not arm, whichever gateway suspended them, so that a run waiting for hours
// (a long sleep, a wait's timeout) costs no memory until its wake time is near and still
// wakes on time, without waiting for River's scheduler (which promotes a scheduled job
// up to 5 s late). With several gateways each arms them: the first claim wins, the
// others find the run not due.
func (inv *Invoker) armUpcoming(ctx context.Context) error {
	wakes, now, err := journal.UpcomingWakes(ctx, inv.pool, inv.armedUntil, inv.wakeLead(), upcomingBatch)
	if err != nil {
		if ctx.Err() == nil {
			inv.log.Warn("arming timers for upcoming wake-ups failed; River's jobs wake those runs", slog.Any("error", err))
		}
		return err
	}
	read := time.Now()
	for _, w := range wakes {
		if !inv.timers.has(runTimer(w.RunID)) {
			inv.armTimer(w.RunID, nil, w.At.Sub(now)-time.Since(read), 0)
		}
	}
	// Each pass looks again at the whole lead from its own now, not only past what the
	// last pass armed: a wake committed after that pass's snapshot was taken, though
	// within its lead (a slow commit), is then still armed. Only a full batch makes the
	// next pass go on from its last wake.
	inv.armedUntil = time.Time{}
	if len(wakes) == upcomingBatch {
		inv.armedUntil = wakes[len(wakes)-1].At
	}
	return nil
}

// reap recovers runs whose lease lapsed and enqueues their jobs, a batch per
// transaction, and returns how many.
func (inv *Invoker) reap(ctx context.Context) (int, error) {
	total := 0
	for {
		ids, err := inv.requeue(ctx, func(tx pgx.Tx) ([]string, error) { return journal.ReapExpiredLeases(ctx, tx, reapBatch) })
		total += len(ids)
		if err != nil || len(ids) < reapBatch {
			return total, err
		}
	}
}

// sweep enqueues a job for each stranded run and returns how many.
func (inv *Invoker) sweep(ctx context.Context) (int, error) {
	ids, err := inv.requeue(ctx, func(tx pgx.Tx) ([]string, error) {
		return journal.StrandedRuns(ctx, tx, inv.sweepGrace, sweepExamine, sweepBatch)
	})
	return len(ids), err
}

// requeue runs pick in a transaction and enqueues, in the same one, a job that invokes
// each run it returns as soon as possible. It returns the runs, none if it failed.
func (inv *Invoker) requeue(ctx context.Context, pick func(tx pgx.Tx) ([]string, error)) ([]string, error) {
	var ids []string
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		if ids, err = pick(tx); err != nil {
			return err
		}
		return inv.enqueueNow(ctx, tx, ids)
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

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
	ids, err := inv.requeue(ctx, func(tx pgx.Tx) ([]string, error) { return journal.ReleaseLeases(ctx, tx, leases) })
	if err != nil {
		return 0, fmt.Errorf("hand over %d invocations: %w", len(leases), err)
	}
	// Abandon them all: a lease not released was lost or its run ended meanwhile.
	inv.cancelCalls(leases, errHandedOver)
	return len(ids), nil
}
