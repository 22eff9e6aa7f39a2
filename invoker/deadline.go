package invoker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
)

// Deadlines and delayed starts. A run's deadline (journal.Run.Deadline) is kept as a
// sleep's wake time is: by this process's timers (timers.go), to the millisecond, with a
// River job scheduled at it as the backstop. When it comes, the run fails with error
// type ErrorTypeDeadline if it has not ended (journal.ExceedDeadline), whatever it is
// doing, and its invocation is fenced out. The gateway that starts a run (through the
// API, a rerun, an event, a schedule's tick, or as a child) arms its timer once the
// start commits, when the deadline is within the lead of the maintenance passes
// (wakeLead); every gateway's pass arms those that come within that lead later, and
// fails at once a run found past its deadline (maintenance.NewDeadlines), so a deadline is
// kept on time while any gateway lives. The River job, inserted in the transaction
// that creates the run, keeps it when none does (River's scheduler runs it up to 5 s
// late); whichever comes first fails the run, the others find it ended. A run created
// scheduled (a delayed start) has its invoke job scheduled at its start time.

// ErrorTypeDeadline: the run passed its deadline before it ended.
const ErrorTypeDeadline = journal.ErrorTypeDeadline

// DeadlineArgs is the River job that fails a run once its deadline has passed.
type DeadlineArgs struct {
	RunID string `json:"run_id"`
}

// Kind implements river.JobArgs.
func (DeadlineArgs) Kind() string { return "stepgate.deadline" }

type deadlineWorker struct {
	river.WorkerDefaults[DeadlineArgs]
	inv *Invoker
}

func (w *deadlineWorker) Work(ctx context.Context, job *river.Job[DeadlineArgs]) error {
	run, err := w.inv.exceedDeadline(ctx, job.Args.RunID)
	switch {
	case errors.Is(err, journal.ErrFinished), errors.Is(err, journal.ErrNotFound):
		return nil
	case errors.Is(err, journal.ErrNotDue):
		if run.Deadline == nil {
			return nil
		}
		// River's clock and the database's may differ by a hair: look again then.
		return river.JobSnooze(max(time.Until(*run.Deadline), 10*time.Millisecond))
	}
	return err
}

// exceedDeadline fails runID with ErrorTypeDeadline if its deadline has passed and it has
// not ended (see journal.ExceedDeadline), waking its parent if it was a child the parent
// waited for, in one transaction; then this process's calls of it are abandoned, its
// timer stopped and its waiters told. It returns journal.ErrFinished, ErrNotDue (with
// the run) or ErrNotFound when it does nothing.
func (inv *Invoker) exceedDeadline(ctx context.Context, runID string) (*journal.Run, error) {
	var run *journal.Run
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		run, err = journal.ExceedDeadline(ctx, tx, runID)
		if err != nil || run.ParentSeq == nil {
			return err
		}
		return inv.enqueue(ctx, tx, *run.ParentID)
	})
	if err != nil {
		return run, err
	}
	inv.log.InfoContext(ctx, "run failed past its deadline", slog.String("run_id", runID), slog.String("function", run.Function),
		slog.String("tenant", run.Tenant), slog.Time("deadline", *run.Deadline))
	inv.metrics.RunFinished(run.Function, run.Tenant, string(journal.StatusFailed), -1)
	inv.traceRunEnd(ctx, run, journal.StatusFailed, run.Error)
	inv.ended(runID, errRunDeadline)
	if run.ParentSeq != nil {
		inv.wake(*run.ParentID, nil, 0)
	}
	return run, nil
}

// newDeadline is the deadline of a run just created: due in `in` from the database
// clock of the statement that created it (or read it), for this process's timer to be
// armed once its transaction commits.
type newDeadline struct {
	runID string
	in    time.Duration
}

// deadlineOf returns the deadline of run, just created, due from its created_at; none
// when it has no deadline.
func deadlineOf(run *journal.Run) []newDeadline {
	if run == nil || run.Deadline == nil || run.Status.Terminal() {
		return nil
	}
	return []newDeadline{{runID: run.ID, in: run.Deadline.Sub(run.CreatedAt)}}
}

// armDeadline arms this process's timer for run's deadline, once the run's creation has
// committed: see armDeadlines.
func (inv *Invoker) armDeadline(run *journal.Run) { inv.armDeadlines(deadlineOf(run)) }

// armDeadlines arms this process's timers for the deadlines ds of runs just created,
// once their creation has committed, those within the lead of the maintenance passes
// (they arm later ones as they come near). Each delay is taken on the database clock of
// the runs' creation, which the commit follows, so no timer fires before its deadline.
func (inv *Invoker) armDeadlines(ds []newDeadline) {
	for _, d := range ds {
		if d.in <= inv.wakeLead() {
			inv.armDeadlineTimer(d.runID, d.in, 0)
		}
	}
}

// armDeadlineTimer fails runID past its deadline in this process after d (see
// exceedDeadline), unless the run ends or the process stops first; then another
// gateway's timer, or the deadline's River job, does it.
func (inv *Invoker) armDeadlineTimer(runID string, d time.Duration, tries int) {
	inv.timers.arm(deadlineTimer(runID), d, func() {
		_, err := inv.exceedDeadline(inv.bg, runID)
		switch {
		case errors.Is(err, journal.ErrNotDue) && tries < maxWakeTries:
			// The database clock may run a hair behind this timer; look again shortly.
			inv.armDeadlineTimer(runID, 500*time.Microsecond, tries+1)
		case err != nil && !errors.Is(err, journal.ErrNotDue) && !errors.Is(err, journal.ErrFinished) &&
			!errors.Is(err, journal.ErrNotFound) && inv.bg.Err() == nil:
			inv.log.Warn("failing a run past its deadline failed; its River job will", slog.String("run_id", runID), slog.Any("error", err))
		}
	})
}

// errRunDeadline is the cause of an invocation's context when its run passed its deadline.
var errRunDeadline = errors.New("invoker: the run passed its deadline")

// enqueueNew inserts, in tx, the River jobs of a run just created: its invocation (at
// its start time when it is scheduled), unless it is claimed already, and its deadline's.
func (inv *Invoker) enqueueNew(ctx context.Context, tx pgx.Tx, run *journal.Run) error {
	return inv.enqueueNewRuns(ctx, tx, []*journal.Run{run})
}

// enqueueNewRuns is enqueueNew of each of runs, in one insert.
func (inv *Invoker) enqueueNewRuns(ctx context.Context, tx pgx.Tx, runs []*journal.Run) error {
	var jobs []river.InsertManyParams
	for _, run := range runs {
		switch run.Status {
		case journal.StatusScheduled:
			jobs = append(jobs, river.InsertManyParams{Args: invokeJob(run), InsertOpts: &river.InsertOpts{ScheduledAt: *run.WakeAt}})
		case journal.StatusQueued:
			jobs = append(jobs, river.InsertManyParams{Args: invokeJob(run)})
		}
		if run.Deadline != nil {
			jobs = append(jobs, deadlineJob(run.ID, *run.Deadline))
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	if _, err := inv.river.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue %d reruns: %w", len(runs), err)
	}
	return nil
}

func deadlineJob(runID string, at time.Time) river.InsertManyParams {
	return river.InsertManyParams{Args: DeadlineArgs{RunID: runID}, InsertOpts: &river.InsertOpts{ScheduledAt: at}}
}
