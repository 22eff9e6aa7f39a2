package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run is one execution of a function.
type Run struct {
	ID                string          `db:"id"`
	Tenant            string          `db:"tenant"`
	Function          string          `db:"function"`
	Revision          int             `db:"revision"`
	Status            Status          `db:"status"`
	Input             json.RawMessage `db:"input"`
	Output            json.RawMessage `db:"output"`
	Error             *ErrorInfo      `db:"error"`
	Identity          Identity        `db:"identity"`
	IdempotencyKey    *string         `db:"idempotency_key"`
	ParentID          *string         `db:"parent_id"`
	ParentSeq         *int            `db:"parent_seq"`  // A child's seq in its parent's journal.
	ParentName        *string         `db:"parent_name"` // The name of that entry.
	RerunOf           *string         `db:"rerun_of"`
	CancelledBy       *Identity       `db:"cancelled_by"` // Who cancelled it.
	Attempts          int             `db:"attempts"`
	Invocation        int             `db:"invocation"`
	FailedInvocations int             `db:"failed_invocations"`
	LeaseUntil        *time.Time      `db:"lease_until"`
	WakeAt            *time.Time      `db:"wake_at"`
	CreatedAt         time.Time       `db:"created_at"`
	StartedAt         *time.Time      `db:"started_at"`
	FinishedAt        *time.Time      `db:"finished_at"`
}

const runColumns = `id, tenant, function, revision, status, input, output, error, identity,
	idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, attempts, invocation, failed_invocations, lease_until,
	wake_at, created_at, started_at, finished_at`

// NewRun is what CreateRun needs to start a run.
type NewRun struct {
	ID             string // A UUID chosen by the caller.
	Tenant         string
	Function       string
	Input          json.RawMessage
	Identity       Identity
	IdempotencyKey string  // Empty for none.
	ParentID       *string // The run that started this one, if any.
	// ParentSeq and ParentName, for a child run (ParentSeq > 0), are the parent's seq
	// and the name of the entry at which the child's outcome is journaled when it ends;
	// see Finish.
	ParentSeq  int
	ParentName string
	RerunOf    *string // The finished run this one reruns, if any.
	// Claim creates the run already claimed by the caller (status running, invocation
	// 1), leased for the revision's timeout plus LeaseGrace, so the caller can invoke it
	// at once with no queue hop. Otherwise it is created queued.
	Claim      bool
	LeaseGrace time.Duration
	// CheckInvokeRoles refuses the run, with a *ForbiddenError, when the revision's
	// config names invoke_roles and InvokerRoles holds none of them. Leave it false
	// for callers allowed to invoke anything (admins).
	CheckInvokeRoles bool
	InvokerRoles     []string
}

// ErrForbidden: the caller's roles may not invoke the function (its invoke_roles).
var ErrForbidden = errors.New("journal: the function's invoke_roles exclude the caller")

// ForbiddenError is ErrForbidden with the roles the function allows.
type ForbiddenError struct {
	Function    string
	InvokeRoles []string
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("function %s may be invoked only by the roles %v", e.Function, e.InvokeRoles)
}

// Unwrap makes errors.Is(err, ErrForbidden) hold.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

// CreateRun inserts a run of the function's current revision. With an idempotency key
// already used for the same tenant and function, it returns that run and created=false
// when the input is the same JSON, or ErrIdempotencyMismatch. It returns ErrNotFound
// when the function is not registered, and a *ForbiddenError when n.CheckInvokeRoles
// and the revision's invoke_roles exclude n.InvokerRoles (checked before the key, so a
// refused caller is never handed someone else's run). It is one statement. A created run notifies EventChannel when a
// gateway watches the tenant.
func CreateRun(ctx context.Context, db DB, n NewRun) (run *Run, created bool, err error) {
	var key *string
	if n.IdempotencyKey != "" {
		key = &n.IdempotencyKey
	}
	var parentSeq *int
	var parentName *string
	if n.ParentSeq > 0 {
		parentSeq, parentName = &n.ParentSeq, &n.ParentName
	}
	rows, _ := db.Query(ctx, `
		WITH ins AS (
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity,
				idempotency_key, parent_id, parent_seq, parent_name, rerun_of, attempts, invocation, lease_until, started_at)
			SELECT $1, f.tenant, f.name, f.revision,
				CASE WHEN $8 THEN 'running' ELSE 'queued' END, $4, $5, $6, $7, $13, $14, $10,
				CASE WHEN $8 THEN 1 ELSE 0 END, CASE WHEN $8 THEN 1 ELSE 0 END,
				CASE WHEN $8 THEN now() + make_interval(secs => r.timeout_ms / 1000.0 + $9) END,
				CASE WHEN $8 THEN now() END
			FROM stepgate.function f
			JOIN stepgate.function_revision r USING (tenant, name, revision)
			WHERE f.tenant = $2 AND f.name = $3 AND `+mayInvoke("r.config", "$11", "$12")+`
			ON CONFLICT (tenant, function, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
			RETURNING `+runColumns+`
		), `+eventCTE("ins")+`
		SELECT ins.* FROM ins, `+eventCount,
		n.ID, n.Tenant, n.Function, n.Input, n.Identity, key, n.ParentID, n.Claim, n.LeaseGrace.Seconds(), n.RerunOf,
		n.CheckInvokeRoles, invokerRoles(n), parentSeq, parentName)
	run, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if err == nil {
		return run, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("create run of %s: %w", n.Function, unstorable(err))
	}
	// The function is unknown, the caller may not invoke it, or the key is taken.
	var allowed bool
	var roles []string
	err = db.QueryRow(ctx, `
		SELECT `+mayInvoke("r.config", "$3", "$4")+`,
			CASE WHEN jsonb_typeof(r.config->'invoke_roles') = 'array'
				THEN ARRAY(SELECT jsonb_array_elements_text(r.config->'invoke_roles')) END
		FROM stepgate.function f
		JOIN stepgate.function_revision r USING (tenant, name, revision)
		WHERE f.tenant = $1 AND f.name = $2`,
		n.Tenant, n.Function, n.CheckInvokeRoles, invokerRoles(n)).Scan(&allowed, &roles)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, ErrNotFound
	}
	if err != nil {
		return nil, false, fmt.Errorf("look up function %s: %w", n.Function, err)
	}
	if !allowed {
		return nil, false, &ForbiddenError{Function: n.Function, InvokeRoles: roles}
	}
	if key == nil {
		return nil, false, ErrNotFound // deleted in between
	}
	rows, _ = db.Query(ctx, `
		SELECT `+runColumns+`, input = $4::jsonb AS same_input FROM stepgate.run
		WHERE tenant = $1 AND function = $2 AND idempotency_key = $3`,
		n.Tenant, n.Function, *key, n.Input)
	type keyed struct {
		Run
		SameInput bool `db:"same_input"`
	}
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[keyed])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, ErrNotFound
	}
	if err != nil {
		return nil, false, fmt.Errorf("find run by idempotency key: %w", unstorable(err))
	}
	if !k.SameInput {
		return nil, false, ErrIdempotencyMismatch
	}
	return &k.Run, false, nil
}

// GetRun returns the tenant's run, or ErrNotFound.
func GetRun(ctx context.Context, db DB, tenant, id string) (*Run, error) {
	rows, _ := db.Query(ctx, `SELECT `+runColumns+` FROM stepgate.run WHERE id = $1 AND tenant = $2`, id, tenant)
	run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// GetRunDetail returns the tenant's run with its journal in seq order and its failed
// attempts oldest first, in one round trip, or ErrNotFound.
func GetRunDetail(ctx context.Context, db DB, tenant, id string) (*Run, []Entry, []Failure, error) {
	var run *Run
	var entries []Entry
	var failures []Failure
	b := &pgx.Batch{}
	b.Queue(`SELECT `+runColumns+` FROM stepgate.run WHERE id = $1 AND tenant = $2`, id, tenant).
		Query(func(rows pgx.Rows) error {
			var err error
			run, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
			return err
		})
	// The run's tenant is checked in each statement too, not only by the first.
	b.Queue(`
		SELECT `+entryColumns+` FROM stepgate.journal_entry e
		WHERE e.run_id = $1 AND EXISTS (SELECT 1 FROM stepgate.run r WHERE r.id = $1 AND r.tenant = $2)
		ORDER BY e.seq`, id, tenant).
		Query(func(rows pgx.Rows) error {
			var err error
			entries, err = pgx.CollectRows(rows, pgx.RowToStructByName[Entry])
			return err
		})
	b.Queue(`
		SELECT f.seq, f.attempt, f.name, f.error, f.created_at FROM stepgate.attempt_failure f
		WHERE f.run_id = $1 AND EXISTS (SELECT 1 FROM stepgate.run r WHERE r.id = $1 AND r.tenant = $2)
		ORDER BY f.created_at, f.seq, f.attempt`, id, tenant).
		Query(func(rows pgx.Rows) error {
			var err error
			failures, err = pgx.CollectRows(rows, pgx.RowToStructByName[Failure])
			return err
		})
	err := db.SendBatch(ctx, b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, entries, failures, nil
}

// RunFilter selects runs for ListRuns. Zero fields do not filter.
type RunFilter struct {
	Function       string
	IdempotencyKey string
	Status         Status
	CreatedAfter   time.Time
	CreatedBefore  time.Time
	After          *Cursor // The page after this position.
	Limit          int     // Defaults to 50.
}

// ListRuns returns the tenant's runs newest first, at most f.Limit of them, and the
// cursor of the next page (nil on the last page).
func ListRuns(ctx context.Context, db DB, tenant string, f RunFilter) ([]Run, *Cursor, error) {
	limit := pageLimit(f.Limit)
	afterT, afterID := f.After.keyset()
	rows, _ := db.Query(ctx, `
		SELECT `+runColumns+` FROM stepgate.run
		WHERE tenant = $1
		  AND ($2 = '' OR function = $2)
		  AND ($3 = '' OR status = $3)
		  AND ($4::timestamptz IS NULL OR created_at > $4)
		  AND ($5::timestamptz IS NULL OR created_at < $5)
		  AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7::uuid))
		  AND ($9 = '' OR idempotency_key = $9)
		ORDER BY created_at DESC, id DESC
		LIMIT $8`,
		tenant, f.Function, string(f.Status), nullTime(f.CreatedAfter), nullTime(f.CreatedBefore),
		afterT, afterID, limit+1, f.IdempotencyKey)
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Run])
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", err)
	}
	runs, next := cutPage(runs, limit, func(r Run) Cursor { return Cursor{r.CreatedAt, r.ID} })
	return runs, next, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Attach marks the tenant's run so that its terminal update sends a notification, and
// returns it as it is now. A waiter LISTENs first and then attaches: either the run was
// already terminal here, or its terminal update will see the mark and notify.
func Attach(ctx context.Context, db DB, tenant, id string) (*Run, error) {
	rows, _ := db.Query(ctx, `
		UPDATE stepgate.run SET notify = true
		WHERE id = $1 AND tenant = $2 AND NOT notify AND status NOT IN ('completed', 'failed', 'cancelled')
		RETURNING `+runColumns, id, tenant)
	run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if errors.Is(err, pgx.ErrNoRows) {
		return GetRun(ctx, db, tenant, id) // terminal, already marked, or not found
	}
	if err != nil {
		return nil, fmt.Errorf("attach to run %s: %w", id, err)
	}
	return run, nil
}

// mayInvoke is the SQL condition that a revision's config lets a caller invoke it: no
// check asked, no invoke_roles (or an empty list), or one of the caller's roles in it.
func mayInvoke(config, check, roles string) string {
	return `(NOT ` + check + ` OR coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(` + config +
		`->'invoke_roles') = 'array' THEN ` + config + `->'invoke_roles' END), 0) = 0 OR ` +
		config + `->'invoke_roles' ?| ` + roles + `::text[])`
}

func invokerRoles(n NewRun) []string {
	if n.InvokerRoles == nil {
		return []string{}
	}
	return n.InvokerRoles
}
