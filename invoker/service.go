package invoker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/canceltree"
)

// The run service: every change of a run's status, and every write that starts runs,
// goes through these methods (and the invocation path in call.go). Each owns its
// transaction, the River jobs it inserts and this process's wake-ups and waiters, so a
// caller cannot start a run and forget its job. The gateway maps HTTP to them.

// StartRun creates a run, queued (or scheduled, with n.StartAt), and the River jobs that
// invoke it (at its start time) and keep its deadline, if it has one, in one transaction
// of the run's tenant. With an idempotency key already used, it returns that run and
// created=false (and inserts no job). The function's flow control applies (flow.go): a
// throttled run is created scheduled at the time its rate allows, a debounced start
// returns the debounced run with created=false. Errors are CreateRun's, and
// *RateLimitedError and ErrDelayedDebounce.
func (inv *Invoker) StartRun(ctx context.Context, db *journal.TenantDB, n journal.NewRun) (run *journal.Run, created bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		run, created, err = inv.createRun(ctx, tx, n)
		if err != nil || !created {
			return err
		}
		return inv.enqueueNew(ctx, tx, run)
	})
	if err != nil {
		return nil, false, err
	}
	inv.armHeld(run)
	if created {
		inv.armDeadline(run)
	}
	return run, created, nil
}

// StartRunNow creates a run already claimed by this process, with the River job of its
// deadline if it has one, in one transaction, and invokes it at once, with no queue hop,
// in the background: the invocation outlives ctx. A run of a function with concurrency
// limits is created claimed too when its slots have room (they are taken in the same
// statement); otherwise, or with an idempotency key, it is created queued and claimed at
// once with its slots (a second round trip), and when a limit holds it, done receives
// nil and a freed slot starts it later. A delayed start (n.StartAt) is
// ignored: use StartRun. done receives the invocation's result once it is applied, or nil when it was
// abandoned or could not be applied (its lease lapses, or was handed over, and another
// gateway makes the invocation again). end is called when the invocation ends, before
// done receives, or at
// once when none starts (the idempotency key named an existing run, which is returned
// with created=false and a nil done, or an error).
//
// The function's flow control applies, as for StartRun: a run it holds back (a throttle
// past its rate, a debounce) is created scheduled, with its River job, and not invoked
// here: it is returned with a nil done (created=false for a start that collapsed into a
// debounced run), and end is called at once. Its errors are StartRun's.
func (inv *Invoker) StartRunNow(ctx context.Context, db *journal.TenantDB, n journal.NewRun, end func()) (run *journal.Run, created bool, done <-chan *Result, err error) {
	n.Claim, n.Lease, n.StartAt = true, inv.leaseTTL, nil
	n.MaxTenantRuns, n.MaxTenantJournalBytes = inv.limits.MaxTenantRuns, inv.limits.MaxTenantJournalBytes
	if n.Deadline != nil {
		// The deadline's job commits with the run.
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			run, created, err = inv.createRun(ctx, tx, n)
			if err != nil || !created {
				return err
			}
			return inv.enqueueNew(ctx, tx, run)
		})
	} else {
		// The hot path: one statement, no transaction round trips. A deadline that
		// comes from the function's run_timeout gets its job at once, before the
		// function is called (a gateway dying between the two leaves that run
		// without it: it then ends when its invocations do, unbounded).
		run, created, err = journal.CreateRun(ctx, db, n)
		var fe *journal.FlowError
		if errors.As(err, &fe) {
			err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				run, created, err = inv.createFlowed(ctx, tx, n, fe)
				if err != nil || !created {
					return err
				}
				return inv.enqueueNew(ctx, tx, run)
			})
		} else if err == nil && created && run.Deadline != nil {
			if _, err = inv.river.Insert(ctx, DeadlineArgs{RunID: run.ID}, &river.InsertOpts{ScheduledAt: *run.Deadline}); err != nil {
				err = fmt.Errorf("schedule the deadline of run %s: %w", run.ID, err)
			}
		}
	}
	if err == nil && created {
		inv.armDeadline(run)
	}
	if err != nil || !created || run.Status == journal.StatusScheduled {
		if err == nil {
			inv.armHeld(run)
		}
		end()
		return run, created && err == nil, nil, err
	}
	ch := make(chan *Result, 1)
	inv.bgWG.Add(1)
	go func() {
		defer inv.bgWG.Done()
		var res *Result
		var err error
		if run.Status == journal.StatusRunning {
			res, err = inv.invokeNew(ctx, run, true)
		} else {
			// Its function has concurrency limits and the run was created queued (no room
			// at its creation, or an idempotency key): this claim takes its slots or holds it (then a freed slot wakes it, and the
			// caller waits for it by notification). A claim that fails leaves it to the
			// stranded-run sweep.
			res, err = inv.resumeNew(ctx, run)
		}
		if errors.Is(err, journal.ErrHeld) || errors.Is(err, journal.ErrNotDue) {
			err = nil
		}
		if err != nil && !errors.Is(err, journal.ErrSuperseded) {
			inv.log.ErrorContext(ctx, "invocation failed to apply; its lease lapses and another gateway retries it",
				"run_id", run.ID, "function", run.Function, "tenant", run.Tenant, "error", err)
		}
		end() // before done: whoever reads done sees the invocation ended
		ch <- res
	}()
	return run, true, ch, nil
}

// resumeNew claims and invokes a run just created queued, from this process.
func (inv *Invoker) resumeNew(ctx context.Context, run *journal.Run) (*Result, error) {
	ctx = context.WithoutCancel(ctx) // the caller may leave; the run goes on
	rev, err := inv.functions.revision(ctx, run.Tenant, run.Function, run.Revision)
	if err != nil {
		return nil, err
	}
	return inv.resume(ctx, rev, run.ID, true, 0)
}

// CancelRun cancels a run of db's tenant that has not finished, as by. The cancellation
// commits before any waiter is told: this process's waiters and wake-up timer directly,
// other gateways' waiters by notification. A running invocation is fenced out (its
// checkpoints and answer are refused) and, in this process, abandoned; a pending
// wake-up finds nothing to claim. A cancelled child's parent gets the cancellation as
// the child's outcome and is woken, its River job committed with the cancellation.
//
// Its children that were not started detached are cancelled too, and theirs, and so on
// (canceltree.CancelDescendants): up to canceltree.MaxTreeCancel in the same transaction, the
// rest by a River job committed with it. A deadlock with a child's answer (see
// canceltree.IsDeadlock) is tried again, twice at most. It returns journal.ErrNotFound, or
// journal.ErrFinished with the finished run.
func (inv *Invoker) CancelRun(ctx context.Context, db *journal.TenantDB, runID string, by journal.Identity) (*journal.Run, error) {
	var run *journal.Run
	var tree []string
	var err error
	for try := 0; try == 0 || (canceltree.IsDeadlock(err) && try < 3); try++ {
		run, tree, err = inv.cancelRun(ctx, db, runID, by)
	}
	if err != nil {
		return run, err
	}
	inv.metrics.RunFinished(run.Function, run.Tenant, string(journal.StatusCancelled), -1)
	inv.traceRunEnd(ctx, run, journal.StatusCancelled, nil)
	inv.cancelled(run.ID)
	inv.cancelledAll(tree)
	if run.ParentSeq != nil {
		inv.wake(*run.ParentID, nil, 0)
	}
	return run, nil
}

// cancelRun is CancelRun's transaction; the caller tells this process once it commits.
func (inv *Invoker) cancelRun(ctx context.Context, db *journal.TenantDB, runID string, by journal.Identity) (run *journal.Run, tree []string, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		run, err = journal.CancelRun(ctx, tx, db.Tenant(), runID, by)
		if err != nil {
			return err
		}
		if tree, err = inv.cancelTree(ctx, tx, db.Tenant(), []string{run.ID}, by); err != nil || run.ParentSeq == nil {
			return err
		}
		// Its parent woke if it still waited for it; if not, the job finds nothing to claim.
		return inv.enqueue(ctx, tx, *run.ParentID)
	})
	return run, tree, err
}

// SendEvent stores an event of db's tenant and starts a run of each function it
// triggers, with their River jobs, in one transaction. A repeated event id returns the
// first event and created=false, and starts nothing.
// It also resumes the tenant's runs that wait for the event (journal.ResumeWaiters), in
// the same transaction, and invokes them from this process once it commits.
func (inv *Invoker) SendEvent(ctx context.Context, db *journal.TenantDB, n journal.NewEvent) (ev *journal.Event, created bool, err error) {
	var deadlines []newDeadline
	n.MaxTenantRuns, n.MaxTenantJournalBytes = inv.limits.MaxTenantRuns, inv.limits.MaxTenantJournalBytes
	n.MaxTenantEventBytes = inv.limits.MaxTenantEventBytes
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		ev, created, deadlines, err = inv.sendEvent(ctx, tx, n)
		return err
	})
	if err == nil {
		inv.armDeadlines(deadlines)
		inv.wakeAll(ev.Resumed)
		for _, run := range ev.Held {
			inv.armHeld(run)
		}
	}
	return ev, created, err
}

// sendEvent stores the event in tx, resumes the runs waiting for it, and enqueues the
// invocations of the runs it starts and resumes, with their deadlines' jobs; the caller
// wakes ev.Resumed and arms the deadlines it returns once tx commits.
func (inv *Invoker) sendEvent(ctx context.Context, tx pgx.Tx, n journal.NewEvent) (*journal.Event, bool, []newDeadline, error) {
	ev, created, err := journal.SendEvent(ctx, tx, n)
	if err != nil || !created {
		return ev, created, nil, err
	}
	var flowed []string
	var deadlines []newDeadline
	if len(ev.Flowed) > 0 {
		if flowed, deadlines, err = inv.startFlowedTriggers(ctx, tx, ev); err != nil {
			return nil, false, nil, err
		}
	}
	if ev.Resumed, err = journal.ResumeWaiters(ctx, tx, ev); err != nil {
		return nil, false, nil, err
	}
	// One statement reads the tenant, priority and deadline of the runs it starts and
	// resumes, which it names by id only.
	runs, now, err := journal.RunJobs(ctx, tx, slices.Concat(ev.Runs, ev.Resumed))
	if err != nil {
		return nil, false, nil, err
	}
	started := make(map[string]bool, len(ev.Runs))
	for _, id := range ev.Runs {
		started[id] = true
	}
	var jobs []river.InsertManyParams
	for _, r := range runs {
		jobs = append(jobs, river.InsertManyParams{Args: runJob(r)})
		if started[r.RunID] && r.Deadline != nil {
			jobs = append(jobs, deadlineJob(r.RunID, *r.Deadline))
			deadlines = append(deadlines, newDeadline{runID: r.RunID, in: r.Deadline.Sub(now)})
		}
	}
	if len(jobs) > 0 {
		if _, err := inv.river.InsertManyTx(ctx, tx, jobs); err != nil {
			return nil, false, nil, fmt.Errorf("enqueue runs of event %s: %w", ev.ID, err)
		}
	}
	ev.Runs = append(ev.Runs, flowed...)
	return ev, true, deadlines, nil
}

// wakeAll invokes runs from this process at once, if they are due (see wake).
func (inv *Invoker) wakeAll(runs []string) {
	for _, id := range runs {
		inv.wake(id, nil, 0)
	}
}

// AwaitRun attaches to a run of db's tenant (so that its terminal update is notified to
// every gateway) and waits until it is terminal or deadline passes, returning the run as
// it then is; journal.ErrNotFound for another tenant's run. changes is a subscription
// to the run (Subscribe) taken before the run could end, or nil to take one now. When
// ctx ends (the client left, or the gateway stops and ends open requests) it returns the
// run as it stands: its reads do not depend on ctx, so a waiting caller gets the run's
// status rather than an error.
//
// A zero deadline waits for nothing: AwaitRun marks the run, so that its end and its
// writes are announced to every gateway (Listener), and returns it as it is now. Subscribe
// before: what happens after the mark is then announced.
func (inv *Invoker) AwaitRun(ctx context.Context, db *journal.TenantDB, runID string, changes <-chan struct{}, deadline time.Time) (*journal.Run, error) {
	if deadline.IsZero() {
		return journal.Attach(ctx, db, db.Tenant(), runID)
	}
	if changes == nil {
		ch, unsubscribe := inv.listener.Subscribe(runID)
		defer unsubscribe()
		changes = ch
	}
	read := func(f func(ctx context.Context) (*journal.Run, error)) (*journal.Run, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return f(ctx)
	}
	run, err := read(func(ctx context.Context) (*journal.Run, error) { return journal.Attach(ctx, db, db.Tenant(), runID) })
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for !run.Status.Terminal() {
		select {
		case <-changes:
		case <-timer.C:
			return run, nil
		case <-ctx.Done():
			return run, nil
		}
		if run, err = read(func(ctx context.Context) (*journal.Run, error) { return journal.GetRun(ctx, db, db.Tenant(), runID) }); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// RerunRun creates the run n, a rerun of the finished run *n.RerunOf, and its River job
// in one transaction. With fromSeq > 1 the new run's journal starts with copies of the
// old run's entries before fromSeq (journal.CopyEntries), which its function replays;
// it runs fromSeq onwards anew. A callback among them is copied as a fresh one, with a
// token of its own: the old run's never reaches the new run. Errors are CreateRun's and CopyEntries' (a
// *journal.SeqRangeError for a fromSeq past the old run's last seq + 1).
func (inv *Invoker) RerunRun(ctx context.Context, db *journal.TenantDB, n journal.NewRun, fromSeq int) (*journal.Run, error) {
	if n.RerunOf == nil {
		return nil, errors.New("rerun: no run to rerun")
	}
	var run *journal.Run
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		if run, err = inv.createRerun(ctx, tx, n, fromSeq); err != nil {
			return err
		}
		return inv.enqueueNew(ctx, tx, run) // its job, and its deadline's (run_timeout)
	})
	if err != nil {
		return nil, err
	}
	inv.armDeadline(run)
	return run, nil
}

// createRerun creates, in tx, the run n, a rerun of *n.RerunOf from fromSeq, as RerunRun
// does, but not its jobs: the caller enqueues them (enqueueNew) in tx, and arms its
// deadline once tx commits.
func (inv *Invoker) createRerun(ctx context.Context, tx pgx.Tx, n journal.NewRun, fromSeq int) (*journal.Run, error) {
	n.Flowed = true // A rerun is not throttled, rate limited nor debounced.
	n.MaxTenantRuns, n.MaxTenantJournalBytes = inv.limits.MaxTenantRuns, inv.limits.MaxTenantJournalBytes
	run, _, err := journal.CreateRun(ctx, tx, n)
	if err != nil {
		return nil, err
	}
	if fromSeq > 1 {
		key, err := inv.callbackKeyOf(ctx)
		if err != nil {
			return nil, err
		}
		fresh := journal.FreshCallbacks{Key: key, NewToken: inv.newCallbackToken}
		if _, err := journal.CopyEntries(ctx, tx, n.Tenant, *n.RerunOf, run.ID, fromSeq, fresh); err != nil {
			return nil, err
		}
	}
	return run, nil
}
