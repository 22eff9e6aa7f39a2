package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Function is one revision of a registered function. Revisions are immutable.
type Function struct {
	Tenant    string          `db:"tenant"`
	Name      string          `db:"name"`
	Revision  int             `db:"revision"`
	URL       string          `db:"url"`
	Config    json.RawMessage `db:"config"`
	CreatedAt time.Time       `db:"created_at"`
}

// InvokeRoles returns the roles the revision's config allows to invoke it (its
// invoke_roles), or nil when it restricts nothing: no list, or not a list, as CreateRun
// reads it.
func (f *Function) InvokeRoles() []string {
	var c struct {
		InvokeRoles []string `json:"invoke_roles"`
	}
	if json.Unmarshal(f.Config, &c) != nil {
		return nil
	}
	return c.InvokeRoles
}

// ResumeRoles returns the roles the revision's config allows to resume its runs' waits
// besides those that may invoke it (its resume_roles), or nil: no list, or not a list, as
// stepgate.may_resume reads it.
func (f *Function) ResumeRoles() []string {
	return resumeRoles(f.Config)
}

// resumeRoles is a config's resume_roles (see Function.ResumeRoles).
func resumeRoles(config json.RawMessage) []string {
	var c struct {
		ResumeRoles []string `json:"resume_roles"`
	}
	if json.Unmarshal(config, &c) != nil {
		return nil
	}
	return c.ResumeRoles
}

const functionColumns = `r.tenant, r.name, r.revision, r.url, r.config, r.created_at`

// RegisterFunction stores a new revision of the function (1 for a new name, else the
// highest revision so far plus one, even after a delete) and makes it current.
// Concurrent registrations of one name are serialized; each gets its own revision.
// The caller has validated config; timeout is its invocation timeout, defaults applied,
// and runTimeout its run_timeout (0 for none), from which each run of the revision gets
// its deadline (see CreateRun). A config.retention (a duration) is how long the
// revision's finished runs are kept (DeleteExpiredRuns).
func RegisterFunction(ctx context.Context, db DB, tenant, name, url string, config json.RawMessage, timeout, runTimeout time.Duration) (*Function, error) {
	if len(config) == 0 {
		config = json.RawMessage(`{}`)
	}
	b := &pgx.Batch{}
	// The lock serializes registrations of one name until the transaction ends (a batch
	// outside one runs as one implicit transaction), so the insert's snapshot, taken
	// after it, holds every earlier revision and no registration has to retry.
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('stepgate.function/' || $1::text || '/' || $2::text, 0))`, tenant, name)
	var fn *Function
	b.Queue(`
		WITH r AS (
			INSERT INTO stepgate.function_revision (tenant, name, revision, url, config, timeout_ms, run_timeout_ms, retention_ms)
			SELECT $1, $2, coalesce(max(revision), 0) + 1, $3, $4, $5, nullif($6::bigint, 0),
				-- config.retention, a duration the caller checked (Postgres reads Go's format).
				(extract(epoch FROM ($4::jsonb->>'retention')::interval) * 1000)::bigint
			FROM stepgate.function_revision WHERE tenant = $1 AND name = $2
			RETURNING *
		), cur AS (
			INSERT INTO stepgate.function (tenant, name, revision)
			SELECT tenant, name, revision FROM r
			ON CONFLICT (tenant, name) DO UPDATE SET revision = excluded.revision
		)
		SELECT `+functionColumns+` FROM r`, tenant, name, url, config, timeout.Milliseconds(), runTimeout.Milliseconds()).
		Query(func(rows pgx.Rows) error {
			var err error
			fn, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Function])
			return err
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("register function %s: %w", name, unstorable(err))
	}
	return fn, nil
}

// GetFunction returns the current revision of a registered function, or ErrNotFound.
func GetFunction(ctx context.Context, db DB, tenant, name string) (*Function, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+functionColumns+`
		FROM stepgate.function f
		JOIN stepgate.function_revision r USING (tenant, name, revision)
		WHERE f.tenant = $1 AND f.name = $2`, tenant, name)
	fn, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Function])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get function %s: %w", name, err)
	}
	return fn, nil
}

// GetRevision returns one revision of a function, registered or since deleted, or
// ErrNotFound.
func GetRevision(ctx context.Context, db DB, tenant, name string, revision int) (*Function, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+functionColumns+` FROM stepgate.function_revision r
		WHERE tenant = $1 AND name = $2 AND revision = $3`, tenant, name, revision)
	fn, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Function])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get function %s revision %d: %w", name, revision, err)
	}
	return fn, nil
}

// ListFunctions returns the current revision of every registered function, by name.
func ListFunctions(ctx context.Context, db DB, tenant string) ([]Function, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+functionColumns+`
		FROM stepgate.function f
		JOIN stepgate.function_revision r USING (tenant, name, revision)
		WHERE f.tenant = $1 ORDER BY f.name`, tenant)
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByName[Function])
	if err != nil {
		return nil, fmt.Errorf("list functions: %w", err)
	}
	return fns, nil
}

// DeleteFunction unregisters a function; its revisions and runs are kept. It returns
// ErrNotFound when the function is not registered.
func DeleteFunction(ctx context.Context, db DB, tenant, name string) error {
	tag, err := db.Exec(ctx, `DELETE FROM stepgate.function WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return fmt.Errorf("delete function %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
