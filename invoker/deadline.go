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

// Deadlines and delayed starts. A run's deadline (journal.Run.Deadline) is kept by a
// River job scheduled at it, inserted in the transaction that creates the run: when it
// comes, the job fails the run with error type ErrorTypeDeadline if it has not ended
// (journal.ExceedDeadline), whatever it is doing, and fences out its invocation. A run
// created scheduled (a delayed start) has its invoke job scheduled at its start time.

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
	run, err := w.inv.ExceedDeadline(ctx, job.Args.RunID)
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

// ExceedDeadline fails runID with ErrorTypeDeadline if its deadline has passed and it has
// not ended (see journal.ExceedDeadline), waking its parent if it was a child the parent
// waited for, in one transaction; then this process's calls of it are abandoned, its
// timer stopped and its waiters told. It returns journal.ErrFinished, ErrNotDue (with
// the run) or ErrNotFound when it does nothing.
func (inv *Invoker) ExceedDeadline(ctx context.Context, runID string) (*journal.Run, error) {
	var run *journal.Run
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		run, err = journal.ExceedDeadline(ctx, tx, runID)
		if err != nil || run.ParentSeq == nil {
			return err
		}
		return inv.Enqueue(ctx, tx, *run.ParentID)
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
		inv.Wake(*run.ParentID)
	}
	return run, nil
}

// errRunDeadline is the cause of an invocation's context when its run passed its deadline.
var errRunDeadline = errors.New("invoker: the run passed its deadline")

// enqueueNew inserts, in tx, the River jobs of a run just created: its invocation (at
// its start time when it is scheduled), unless it is claimed already, and its deadline's.
func (inv *Invoker) enqueueNew(ctx context.Context, tx pgx.Tx, run *journal.Run) error {
	var jobs []river.InsertManyParams
	switch run.Status {
	case journal.StatusScheduled:
		jobs = append(jobs, river.InsertManyParams{Args: invokeJob(run), InsertOpts: &river.InsertOpts{ScheduledAt: *run.WakeAt}})
	case journal.StatusQueued:
		jobs = append(jobs, river.InsertManyParams{Args: invokeJob(run)})
	}
	if run.Deadline != nil {
		jobs = append(jobs, deadlineJob(run.ID, *run.Deadline))
	}
	if len(jobs) == 0 {
		return nil
	}
	if _, err := inv.river.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue run %s: %w", run.ID, err)
	}
	return nil
}

func deadlineJob(runID string, at time.Time) river.InsertManyParams {
	return river.InsertManyParams{Args: DeadlineArgs{RunID: runID}, InsertOpts: &river.InsertOpts{ScheduledAt: at}}
}

// deadlineJobs returns the deadline jobs of those of runIDs that have a deadline.
func deadlineJobs(ctx context.Context, tx pgx.Tx, runIDs []string) ([]river.InsertManyParams, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	deadlines, err := journal.Deadlines(ctx, tx, runIDs)
	if err != nil {
		return nil, err
	}
	var jobs []river.InsertManyParams
	for id, at := range deadlines {
		jobs = append(jobs, deadlineJob(id, at))
	}
	return jobs, nil
}
