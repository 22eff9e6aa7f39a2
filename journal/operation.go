package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Operation statuses.
const (
	OperationRunning   = "running"
	OperationCompleted = "completed"
	OperationFailed    = "failed"
)

// CancelFilter selects runs of a tenant for a bulk operation. Every criterion set must
// hold; at least one is set (the caller validates). Only runs that have not finished
// match, whatever Statuses says.
type CancelFilter struct {
	Function             *string    `json:"function,omitempty"`
	Statuses             []Status   `json:"status,omitempty"` // Any of them; all unfinished statuses when empty.
	CreatedAfter         *time.Time `json:"created_after,omitempty"`
	CreatedBefore        *time.Time `json:"created_before,omitempty"`
	IdempotencyKeyPrefix *string    `json:"idempotency_key_prefix,omitempty"`
}

// Operation is a bulk operation on a tenant's runs, done in the background in batches.
// Kind "cancel" cancels the runs matching Filter that were created before it.
type Operation struct {
	ID         string
	Tenant     string
	Kind       string
	Status     string
	Filter     CancelFilter
	By         Identity
	Matched    *int64 // Runs matching when the work began; nil before.
	Cancelled  int64
	Batches    int
	Error      *string
	CreatedAt  time.Time
	FinishedAt *time.Time
}

// operationOf is the operation a row of stepgate.operation holds.
func operationOf(r dbsqlc.StepgateOperation) (*Operation, error) {
	op := &Operation{
		ID: r.ID, Tenant: r.Tenant, Kind: r.Kind, Status: r.Status, By: r.ByIdentity,
		Matched: r.Matched, Cancelled: r.Cancelled, Batches: int(r.Batches), Error: r.Error,
		CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
	}
	if err := json.Unmarshal(r.Filter, &op.Filter); err != nil {
		return nil, fmt.Errorf("the filter of operation %s: %w", r.ID, err)
	}
	return op, nil
}

// RunningOperationError: the tenant already has a running operation, ID; a tenant runs
// one at a time.
type RunningOperationError struct{ ID string }

func (e *RunningOperationError) Error() string {
	return fmt.Sprintf("journal: operation %s is still running; one runs at a time", e.ID)
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *RunningOperationError) Unwrap() error { return ErrConflict }

// CreateOperation stores a running cancel operation of tenant with filter, asked for by
// by. It returns a *RunningOperationError when the tenant has one running.
func CreateOperation(ctx context.Context, db DB, id, tenant string, filter CancelFilter, by Identity) (*Operation, error) {
	f, err := json.Marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	q := dbsqlc.New(db)
	row, err := q.OperationCreate(ctx, dbsqlc.OperationCreateParams{ID: id, Tenant: tenant, Filter: f, ByIdentity: by})
	if err == nil {
		return operationOf(row)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	running, err := q.OperationRunningID(ctx, tenant)
	if err != nil {
		// It finished in between: the caller may ask again.
		return nil, fmt.Errorf("create operation: %w", ErrConflict)
	}
	return nil, &RunningOperationError{ID: running}
}

// GetOperation returns the tenant's operation id, or ErrNotFound.
func GetOperation(ctx context.Context, db DB, tenant, id string) (*Operation, error) {
	row, err := dbsqlc.New(db).OperationGet(ctx, dbsqlc.OperationGetParams{ID: id, Tenant: tenant})
	return gotOperation(row, err, id)
}

// gotOperation is the operation id read as row with err, or ErrNotFound.
func gotOperation(row dbsqlc.StepgateOperation, err error, id string) (*Operation, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	op, err := operationOf(row)
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// CountMatching sets the operation's matched count to the runs its filter matches now,
// unless it is set already.
func CountMatching(ctx context.Context, db DB, op *Operation) error {
	f := filterOf(op)
	matched, err := dbsqlc.New(db).OperationCountMatching(ctx, dbsqlc.OperationCountMatchingParams{
		Op: op.ID, Tenant: op.Tenant, Before: f.before, Function: f.function, CreatedAfter: f.createdAfter,
		Prefix: f.prefix, Statuses: f.statuses,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("count runs of operation %s: %w", op.ID, err)
	}
	op.Matched = matched
	return nil
}

// BatchCursor is a keyset position in an operation's walk over runs by (created_at, id).
type BatchCursor struct {
	CreatedAt time.Time
	ID        string
}

// CancelledRun is a run a batch cancelled.
type CancelledRun struct {
	ID        string
	ParentID  *string // Set, with ParentSeq, when the run is a child.
	ParentSeq *int
	CreatedAt time.Time
}

// CancelBatch cancels up to limit runs matching op's filter past after (nil: from the
// start), oldest first, like CancelRun (as op.By), and adds them to op's counts. It
// returns the runs it cancelled and the position it reached, nil when no run is left
// (the caller then calls FinishOperation). A child cancelled so wakes its waiting
// parent: the caller enqueues the parents' jobs in the same transaction.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots, child_end_wakes_parent.
func CancelBatch(ctx context.Context, db DB, op *Operation, after *BatchCursor, limit int) ([]CancelledRun, *BatchCursor, error) {
	f := filterOf(op)
	p := dbsqlc.OperationBatchParams{
		Tenant: op.Tenant, Before: f.before, Function: f.function, CreatedAfter: f.createdAfter,
		Prefix: f.prefix, Statuses: f.statuses, MaxRuns: int32(limit),
	}
	if after != nil {
		p.AfterT, p.AfterID = &after.CreatedAt, &after.ID
	}
	q := dbsqlc.New(db)
	batch, err := q.OperationBatch(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("select a batch of operation %s: %w", op.ID, err)
	}
	todo := make([]BatchCursor, len(batch))
	ids := make([]string, len(batch))
	for i, r := range batch {
		todo[i] = BatchCursor{CreatedAt: r.CreatedAt, ID: r.ID}
		ids[i] = r.ID
	}
	e, err := json.Marshal(ErrorInfo{Type: "cancelled", Message: "cancelled by " + op.By.Subject + " (operation " + op.ID + ")"})
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
	}
	by, err := json.Marshal(op.By)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
	}
	rows, err := q.OperationCancelBatch(ctx, dbsqlc.OperationCancelBatchParams{
		Ids: ids, Tenant: op.Tenant, Error: e, CancelledBy: by, Op: op.ID,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
	}
	cancelled := make([]CancelledRun, len(rows))
	for i, r := range rows {
		cancelled[i] = CancelledRun{ID: r.ID, ParentID: r.ParentID, CreatedAt: r.CreatedAt}
		if r.ParentSeq != nil {
			seq := int(*r.ParentSeq)
			cancelled[i].ParentSeq = &seq
		}
	}
	op.Cancelled += int64(len(cancelled))
	op.Batches++
	if len(todo) < limit {
		return cancelled, nil, nil
	}
	return cancelled, &todo[len(todo)-1], nil
}

// FinishOperation marks op completed, or failed with errMsg when it is not empty.
func FinishOperation(ctx context.Context, db DB, op *Operation, errMsg string) error {
	row, err := dbsqlc.New(db).OperationFinish(ctx, dbsqlc.OperationFinishParams{ID: op.ID, ErrorMessage: errMsg})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finish operation %s: %w", op.ID, err)
	}
	got, err := operationOf(row)
	if err != nil {
		return fmt.Errorf("finish operation %s: %w", op.ID, err)
	}
	*op = *got
	return nil
}

// GetOperationByID returns any tenant's operation id (for the background worker, on
// the system pool), or ErrNotFound.
func GetOperationByID(ctx context.Context, db DB, id string) (*Operation, error) {
	row, err := dbsqlc.New(db).OperationGetByID(ctx, id)
	return gotOperation(row, err, id)
}

// runFilter is the arguments of OperationCountMatching and OperationBatch that match the
// runs of an operation's filter created before it.
type runFilter struct {
	before       time.Time
	function     *string
	createdAfter *time.Time
	prefix       *string
	statuses     []string
}

func filterOf(op *Operation) runFilter {
	f := op.Filter
	before := op.CreatedAt
	if f.CreatedBefore != nil && f.CreatedBefore.Before(before) {
		before = f.CreatedBefore.Add(-time.Microsecond) // created_before is exclusive
	}
	statuses := []string{}
	for _, s := range f.Statuses {
		statuses = append(statuses, string(s))
	}
	if len(statuses) == 0 {
		statuses = []string{"scheduled", "queued", "running", "suspended"}
	}
	return runFilter{
		before: before, function: f.Function, createdAfter: f.CreatedAfter,
		prefix: f.IdempotencyKeyPrefix, statuses: statuses,
	}
}
