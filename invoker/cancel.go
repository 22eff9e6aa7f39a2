package invoker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/canceltree"
	"github.com/stepgate/stepgate/journal/operation"
)

// CancelBatchSize is how many runs one transaction of a bulk cancel cancels.
const CancelBatchSize = 1000

// CancelTreeArgs is the River job that cancels what remains of the trees below Roots
// once a cancellation passed canceltree.MaxTreeCancel descendants in its own transaction.
type CancelTreeArgs struct {
	Tenant string           `json:"tenant"`
	Roots  []string         `json:"roots"`
	By     journal.Identity `json:"by"`
}

// Kind implements river.JobArgs.
func (CancelTreeArgs) Kind() string { return "cancel_tree" }

// CancelOperationArgs is the River job that does a bulk cancel operation.
type CancelOperationArgs struct {
	ID string `json:"id"`
}

// Kind implements river.JobArgs.
func (CancelOperationArgs) Kind() string { return "cancel_operation" }

// cancelTree cancels, in tx, the descendants of roots up to canceltree.MaxTreeCancel and,
// past it, enqueues a CancelTreeArgs job to continue. The caller tells this process
// about the returned runs (cancelled) once tx commits.
func (inv *Invoker) cancelTree(ctx context.Context, tx pgx.Tx, tenant string, roots []string, by journal.Identity) ([]string, error) {
	ids, err := canceltree.CancelDescendants(ctx, tx, tenant, roots, by, canceltree.MaxTreeCancel)
	if err != nil || len(ids) < canceltree.MaxTreeCancel {
		return ids, err
	}
	if _, err := inv.river.InsertTx(ctx, tx, CancelTreeArgs{Tenant: tenant, Roots: roots, By: by}, nil); err != nil {
		return nil, fmt.Errorf("enqueue the rest of a cancel tree: %w", err)
	}
	return ids, nil
}

// cancelledAll tells this process that runs were cancelled (see cancelled).
func (inv *Invoker) cancelledAll(ids []string) {
	for _, id := range ids {
		inv.cancelled(id)
	}
}

type cancelTreeWorker struct {
	river.WorkerDefaults[CancelTreeArgs]
	inv *Invoker
}

// Timeout disables River's job timeout: each batch is its own transaction, and a
// retried job continues where the last one stopped.
func (w *cancelTreeWorker) Timeout(*river.Job[CancelTreeArgs]) time.Duration { return -1 }

func (w *cancelTreeWorker) Work(ctx context.Context, job *river.Job[CancelTreeArgs]) error {
	a := job.Args
	for {
		var ids []string
		err := pgx.BeginFunc(ctx, w.inv.pool, func(tx pgx.Tx) error {
			var err error
			ids, err = canceltree.CancelDescendants(ctx, tx, a.Tenant, a.Roots, a.By, canceltree.MaxTreeCancel)
			return err
		})
		if err != nil {
			return err
		}
		w.inv.cancelledAll(ids)
		if len(ids) < canceltree.MaxTreeCancel {
			return nil
		}
	}
}

// StartCancel stores a bulk cancel of db's tenant's runs matching filter, as
// by, and the River job that does it, in one transaction; it returns at once. It
// returns a *operation.RunningOperationError when the tenant has one running.
func (o *Operations) StartCancel(ctx context.Context, db *journal.TenantDB, filter operation.CancelFilter, by journal.Identity) (*operation.Operation, error) {
	inv := o.inv
	var op *operation.Operation
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		op, err = operation.CreateOperation(ctx, tx, uuid.Must(uuid.NewV7()).String(), db.Tenant(), operation.OperationKindCancel, filter, nil, by)
		if err != nil {
			return err
		}
		if _, err := inv.river.InsertTx(ctx, tx, CancelOperationArgs{ID: op.ID}, nil); err != nil {
			return fmt.Errorf("enqueue operation %s: %w", op.ID, err)
		}
		return nil
	})
	return op, err
}

type cancelOperationWorker struct {
	river.WorkerDefaults[CancelOperationArgs]
	inv *Invoker
}

// Timeout disables River's job timeout: each batch is its own transaction, and a
// retried job continues where the last one stopped (the runs it cancelled no longer
// match).
func (w *cancelOperationWorker) Timeout(*river.Job[CancelOperationArgs]) time.Duration { return -1 }

func (w *cancelOperationWorker) Work(ctx context.Context, job *river.Job[CancelOperationArgs]) error {
	err := w.work(ctx, job)
	if err != nil && ctx.Err() == nil && job.Attempt >= job.MaxAttempts {
		// River gives up: end the operation so that the tenant may start another.
		op := &operation.Operation{ID: job.Args.ID}
		if ferr := operation.FinishOperation(context.WithoutCancel(ctx), w.inv.pool, op, err.Error()); ferr != nil {
			return fmt.Errorf("%w; and marking the operation failed: %w", err, ferr)
		}
		w.inv.log.Error("bulk cancel failed", slog.String("operation_id", op.ID), slog.Any("error", err))
	}
	return err
}

func (w *cancelOperationWorker) work(ctx context.Context, job *river.Job[CancelOperationArgs]) error {
	inv := w.inv
	op, err := operation.GetOperationByID(ctx, inv.pool, job.Args.ID)
	if err != nil || op.Status != operation.OperationRunning {
		return err
	}
	log := inv.log.With(slog.String("operation_id", op.ID), slog.String("tenant", op.Tenant))
	if err := operation.CountMatching(ctx, inv.pool, op); err != nil {
		return err
	}
	var cursor *operation.BatchCursor
	for {
		var batch []operation.CancelledRun
		var tree []string
		stopped := false
		err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			running, err := operation.LockOperation(ctx, tx, op)
			if err != nil || !running {
				stopped = true
				return err
			}
			batch, cursor, err = operation.CancelBatch(ctx, tx, op, cursor, CancelBatchSize)
			if err != nil || len(batch) == 0 {
				return err
			}
			roots := make([]string, len(batch))
			var parents []string
			for i, r := range batch {
				roots[i] = r.ID
				if r.ParentSeq != nil {
					// Its parent woke if it still waited for it; if not, the job finds nothing to claim.
					parents = append(parents, *r.ParentID)
				}
			}
			if tree, err = inv.cancelTree(ctx, tx, op.Tenant, roots, op.By); err != nil {
				return err
			}
			if err := inv.enqueueNow(ctx, tx, parents); err != nil {
				return fmt.Errorf("enqueue parents of cancelled runs: %w", err)
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("bulk cancel batch failed; River retries it", slog.Any("error", err))
			}
			return err
		}
		if stopped {
			log.Info("bulk cancel stopped", slog.String("status", op.Status), slog.Int64("cancelled", op.Cancelled))
			return nil
		}
		for _, r := range batch {
			inv.cancelled(r.ID)
			if r.ParentSeq != nil {
				inv.wake(*r.ParentID, nil, 0)
			}
		}
		inv.cancelledAll(tree)
		if cursor == nil {
			break
		}
	}
	if err := operation.FinishOperation(ctx, inv.pool, op, ""); err != nil {
		return err
	}
	log.Info("bulk cancel finished", slog.Int64("cancelled", op.Cancelled), slog.Int("batches", op.Batches))
	return nil
}
