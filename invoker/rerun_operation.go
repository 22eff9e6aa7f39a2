package invoker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/operation"
)

// RerunBatchSize is how many runs one transaction of a bulk rerun takes.
const RerunBatchSize = 500

// RerunOperationArgs is the River job that does a bulk rerun operation.
type RerunOperationArgs struct {
	ID string `json:"id"`
}

// Kind implements river.JobArgs.
func (RerunOperationArgs) Kind() string { return "rerun_operation" }

// StartRerun stores a bulk rerun of db's tenant's finished runs matching filter,
// as by, from opts, and the River job that does it, in one transaction; it returns at
// once. It returns a *operation.RunningOperationError when the tenant has one running.
func (o *Operations) StartRerun(ctx context.Context, db *journal.TenantDB, filter operation.CancelFilter, opts operation.RerunOptions, by journal.Identity) (*operation.Operation, error) {
	inv := o.inv
	var op *operation.Operation
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		op, err = operation.CreateOperation(ctx, tx, uuid.Must(uuid.NewV7()).String(), db.Tenant(), operation.OperationKindRerun, filter, &opts, by)
		if err != nil {
			return err
		}
		if _, err := inv.river.InsertTx(ctx, tx, RerunOperationArgs{ID: op.ID}, nil); err != nil {
			return fmt.Errorf("enqueue operation %s: %w", op.ID, err)
		}
		return nil
	})
	return op, err
}

// Cancel cancels db's tenant's running operation id, as by (see
// operation.CancelOperation): its worker does no further batch.
func (o *Operations) Cancel(ctx context.Context, db *journal.TenantDB, id string, by journal.Identity) (*operation.Operation, error) {
	return operation.CancelOperation(ctx, db, db.Tenant(), id, by)
}

type rerunOperationWorker struct {
	river.WorkerDefaults[RerunOperationArgs]
	inv *Invoker
}

// Timeout disables River's job timeout: each batch is its own transaction, and a
// retried job continues where the last one stopped (the runs it took are recorded).
func (w *rerunOperationWorker) Timeout(*river.Job[RerunOperationArgs]) time.Duration { return -1 }

func (w *rerunOperationWorker) Work(ctx context.Context, job *river.Job[RerunOperationArgs]) error {
	_, err := w.inv.rerunOperation(ctx, job.Args.ID, -1)
	if err != nil && ctx.Err() == nil && job.Attempt >= job.MaxAttempts {
		// River gives up: end the operation so that the tenant may start another.
		op := &operation.Operation{ID: job.Args.ID}
		if ferr := operation.FinishOperation(context.WithoutCancel(ctx), w.inv.pool, op, err.Error()); ferr != nil {
			return fmt.Errorf("%w; and marking the operation failed: %w", err, ferr)
		}
		w.inv.log.Error("bulk rerun failed", slog.String("operation_id", op.ID), slog.Any("error", err))
	}
	return err
}

// rerunOperation does the rerun operation id, up to maxBatches batches (all when
// negative), and returns it as it stands. Each batch is one transaction that locks the
// operation (so a cancel waits for it, and two workers of the same operation take turns),
// takes the next runs past the position the operation's row holds, reruns each (a run
// that cannot be rerun is recorded with why), records them and the new position in the
// operation and enqueues the new runs. A run is so rerun at most once by an operation,
// however often its job is retried: a batch commits its runs and the position together.
func (inv *Invoker) rerunOperation(ctx context.Context, id string, maxBatches int) (*operation.Operation, error) {
	op, err := operation.GetOperationByID(ctx, inv.pool, id)
	if err != nil || op.Status != operation.OperationRunning {
		return op, err
	}
	log := inv.log.With(slog.String("operation_id", op.ID), slog.String("tenant", op.Tenant))
	if err := operation.CountMatching(ctx, inv.pool, op); err != nil {
		return nil, err
	}
	for batches := 0; maxBatches < 0 || batches < maxBatches; batches++ {
		var created []*journal.Run
		var quota *journal.QuotaError
		stopped, done := false, false
		err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			running, err := operation.LockOperation(ctx, tx, op)
			if err != nil || !running {
				stopped = true
				return err
			}
			batch, err := operation.RerunBatch(ctx, tx, op, inv.rerunBatchSize)
			if err != nil {
				return err
			}
			done = len(batch) < inv.rerunBatchSize
			if len(batch) == 0 {
				return nil
			}
			took := make([]operation.RerunDone, 0, len(batch))
			for _, old := range batch {
				run, why, err := inv.rerunOne(ctx, tx, op, old)
				if errors.As(err, &quota) {
					return err
				}
				if err != nil {
					return fmt.Errorf("rerun run %s: %w", old.ID, err)
				}
				if run == nil {
					took = append(took, operation.RerunDone{RunID: old.ID, Error: why})
					continue
				}
				created = append(created, run)
				took = append(took, operation.RerunDone{RunID: old.ID, NewRunID: run.ID})
			}
			if err := inv.enqueueNewRuns(ctx, tx, created); err != nil {
				return err
			}
			last := batch[len(batch)-1]
			return operation.RecordRerunBatch(ctx, tx, op, took, operation.BatchCursor{CreatedAt: last.CreatedAt, ID: last.ID})
		})
		if quota != nil {
			if err := operation.FinishOperation(ctx, inv.pool, op, quota.Error()); err != nil {
				return nil, err
			}
			log.Warn("bulk rerun stopped by the tenant's quota", slog.String("error", quota.Error()))
			return op, nil
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("bulk rerun batch failed; River retries it", slog.Any("error", err))
			}
			return nil, err
		}
		for _, run := range created {
			inv.armDeadline(run)
		}
		if stopped {
			log.Info("bulk rerun stopped", slog.String("status", op.Status), slog.Int64("rerun", op.Cancelled))
			return op, nil
		}
		if inv.afterRerunBatch != nil {
			inv.afterRerunBatch()
		}
		if done {
			if err := operation.FinishOperation(ctx, inv.pool, op, ""); err != nil {
				return nil, err
			}
			log.Info("bulk rerun finished", slog.Int64("rerun", op.Cancelled), slog.Int64("failed", op.Failed), slog.Int("batches", op.Batches))
			return op, nil
		}
	}
	return op, nil
}

// rerunOne reruns old in tx for op, as op.By: it returns the new run, or nil and why
// old cannot be rerun (its function is gone, the caller may not invoke it, the start seq
// is out of its bounds), having written nothing then: the bounds are checked before the
// run is created, and a refused CreateRun inserts nothing. So a batch needs no savepoint
// per run (past 64 in a transaction, subtransactions slow every snapshot of the
// database). Other errors, a *journal.QuotaError included, are returned.
func (inv *Invoker) rerunOne(ctx context.Context, tx pgx.Tx, op *operation.Operation, old operation.RerunCandidate) (*journal.Run, string, error) {
	fromSeq := 1
	switch {
	case op.Options.FromSeq != nil:
		fromSeq = *op.Options.FromSeq
	case op.Options.From == operation.RerunFromFailure && old.FailureSeq > 0:
		fromSeq = old.FailureSeq
	}
	var err error
	if fromSeq != 1 {
		err = journal.CheckCopyEntries(ctx, tx, op.Tenant, old.ID, fromSeq)
		if errors.Is(err, journal.ErrNotFound) {
			return nil, fmt.Sprintf("run %s was deleted (retention)", old.ID), nil
		}
	}
	var run *journal.Run
	if err == nil {
		run, err = inv.createRerun(ctx, tx, journal.NewRun{
			ID: uuid.Must(uuid.NewV7()).String(), Tenant: op.Tenant, Function: old.Function, Input: old.Input,
			Identity: op.By, RerunOf: &old.ID,
		}, fromSeq)
	}
	var forbidden *journal.ForbiddenError
	var seq *journal.SeqRangeError
	switch {
	case err == nil:
		return run, "", nil
	case errors.As(err, &forbidden):
		return nil, fmt.Sprintf("function %s may be invoked only by the roles (%s) or admin", old.Function, strings.Join(forbidden.InvokeRoles, ", ")), nil
	case errors.As(err, &seq):
		return nil, seq.Error(), nil
	case errors.Is(err, journal.ErrNotFound):
		return nil, fmt.Sprintf("function %s is no longer registered", old.Function), nil
	}
	return nil, "", err
}
