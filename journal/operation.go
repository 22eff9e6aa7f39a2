package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	ID         string       `db:"id"`
	Tenant     string       `db:"tenant"`
	Kind       string       `db:"kind"`
	Status     string       `db:"status"`
	Filter     CancelFilter `db:"filter"`
	By         Identity     `db:"by_identity"`
	Matched    *int64       `db:"matched"` // Runs matching when the work began; nil before.
	Cancelled  int64        `db:"cancelled"`
	Batches    int          `db:"batches"`
	Error      *string      `db:"error"`
	CreatedAt  time.Time    `db:"created_at"`
	FinishedAt *time.Time   `db:"finished_at"`
}

const operationColumns = `id, tenant, kind, status, filter, by_identity, matched, cancelled, batches, error, created_at, finished_at`

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
	rows, _ := db.Query(ctx, `
		INSERT INTO stepgate.operation (id, tenant, kind, filter, by_identity)
		VALUES ($1, $2, 'cancel', $3, $4)
		ON CONFLICT (tenant) WHERE status = 'running' DO NOTHING
		RETURNING `+operationColumns, id, tenant, filter, by)
	op, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Operation])
	if err == nil {
		return op, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	var running string
	err = db.QueryRow(ctx, `SELECT id::text FROM stepgate.operation WHERE tenant = $1 AND status = 'running'`, tenant).Scan(&running)
	if err != nil {
		// It finished in between: the caller may ask again.
		return nil, fmt.Errorf("create operation: %w", ErrConflict)
	}
	return nil, &RunningOperationError{ID: running}
}

// GetOperation returns the tenant's operation id, or ErrNotFound.
func GetOperation(ctx context.Context, db DB, tenant, id string) (*Operation, error) {
	return getOperation(ctx, db, id, `SELECT `+operationColumns+` FROM stepgate.operation WHERE id = $1 AND tenant = $2`, id, tenant)
}

// getOperation reads the one operation (id) that query selects with args, or ErrNotFound.
func getOperation(ctx context.Context, db DB, id, query string, args ...any) (*Operation, error) {
	rows, _ := db.Query(ctx, query, args...)
	op, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Operation])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// CountMatching sets the operation's matched count to the runs its filter matches now,
// unless it is set already.
func CountMatching(ctx context.Context, db DB, op *Operation) error {
	err := db.QueryRow(ctx, `
		UPDATE stepgate.operation SET matched = (
			SELECT count(*) FROM stepgate.run r WHERE `+filterSQL+`)
		WHERE id = @op AND matched IS NULL
		RETURNING matched`, filterArgs(op, nil)).Scan(&op.Matched)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("count runs of operation %s: %w", op.ID, err)
	}
	return nil
}

// BatchCursor is a keyset position in an operation's walk over runs by (created_at, id).
type BatchCursor struct {
	CreatedAt time.Time
	ID        string
}

// CancelledRun is a run a batch cancelled.
type CancelledRun struct {
	ID        string    `db:"id"`
	ParentID  *string   `db:"parent_id"` // Set, with ParentSeq, when the run is a child.
	ParentSeq *int      `db:"parent_seq"`
	CreatedAt time.Time `db:"created_at"`
}

// CancelBatch cancels up to limit runs matching op's filter past after (nil: from the
// start), oldest first, like CancelRun (as op.By), and adds them to op's counts. It
// returns the runs it cancelled and the position it reached, nil when no run is left
// (the caller then calls FinishOperation). A child cancelled so wakes its waiting
// parent: the caller enqueues the parents' jobs in the same transaction.
func CancelBatch(ctx context.Context, db DB, op *Operation, after *BatchCursor, limit int) ([]CancelledRun, *BatchCursor, error) {
	args := filterArgs(op, after)
	args["limit"] = limit
	rows, _ := db.Query(ctx, `
		SELECT r.id::text AS id, r.created_at FROM stepgate.run r
		WHERE `+filterSQL+` AND (@after_t::timestamptz IS NULL OR (r.created_at, r.id) > (@after_t, @after_id::uuid))
		ORDER BY r.created_at, r.id
		LIMIT @limit
		FOR UPDATE`, args)
	todo, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (BatchCursor, error) {
		var c BatchCursor
		return c, row.Scan(&c.ID, &c.CreatedAt)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("select a batch of operation %s: %w", op.ID, err)
	}
	ids := make([]string, len(todo))
	for i, c := range todo {
		ids[i] = c.ID
	}
	rows, _ = db.Query(ctx, `
		WITH u AS (
			UPDATE stepgate.run r SET status = 'cancelled', error = $3, lease_until = NULL,
				wake_at = NULL, awaiting = NULL, finished_at = now(), cancelled_by = $4
			WHERE r.id = ANY ($1::uuid[]) AND r.tenant = $2
				AND r.status IN ('scheduled', 'queued', 'running', 'suspended')
			RETURNING r.id, r.parent_id, r.parent_seq, r.created_at, r.notify
		), waits AS (
			DELETE FROM stepgate.run_wait w USING u WHERE w.run_id = u.id
		), notified AS (
			SELECT pg_notify('`+NotifyChannel+`', id::text) FROM u WHERE notify
		), counted AS (
			UPDATE stepgate.operation SET cancelled = cancelled + (SELECT count(*) FROM u), batches = batches + 1
			WHERE id = $5
		)
		SELECT u.id::text AS id, u.parent_id::text AS parent_id, u.parent_seq, u.created_at
		FROM u, (SELECT count(*) FROM notified) notified_count`,
		ids, op.Tenant, ErrorInfo{Type: "cancelled", Message: "cancelled by " + op.By.Subject + " (operation " + op.ID + ")"},
		op.By, op.ID)
	cancelled, err := pgx.CollectRows(rows, pgx.RowToStructByName[CancelledRun])
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
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
	rows, _ := db.Query(ctx, `
		UPDATE stepgate.operation SET status = CASE WHEN $2 = '' THEN 'completed' ELSE 'failed' END,
			error = nullif($2, ''), finished_at = now()
		WHERE id = $1 AND status = 'running'
		RETURNING `+operationColumns, op.ID, errMsg)
	got, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Operation])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finish operation %s: %w", op.ID, err)
	}
	*op = *got
	return nil
}

// GetOperationByID returns any tenant's operation id (for the background worker, on
// the system pool), or ErrNotFound.
func GetOperationByID(ctx context.Context, db DB, id string) (*Operation, error) {
	return getOperation(ctx, db, id, `SELECT `+operationColumns+` FROM stepgate.operation WHERE id = $1`, id)
}

// filterSQL matches the runs of the operation's filter created before it, as r, with
// filterArgs.
const filterSQL = `r.tenant = @tenant AND r.created_at <= @before
		AND (@function::text IS NULL OR r.function = @function)
		AND (@created_after::timestamptz IS NULL OR r.created_at > @created_after)
		AND (@prefix::text IS NULL OR starts_with(r.idempotency_key, @prefix))
		AND r.status = ANY (@statuses::text[])`

func filterArgs(op *Operation, after *BatchCursor) namedArgs {
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
	args := namedArgs{
		"op": op.ID, "tenant": op.Tenant, "before": before, "function": f.Function,
		"created_after": f.CreatedAfter, "prefix": f.IdempotencyKeyPrefix, "statuses": statuses,
		"after_t": nil, "after_id": nil,
	}
	if after != nil {
		args["after_t"], args["after_id"] = after.CreatedAt, after.ID
	}
	return args
}
