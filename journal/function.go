package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Function is one revision of a registered function. Revisions are immutable.
type Function struct {
	Tenant    string
	Name      string
	Revision  int
	URL       string
	Config    json.RawMessage
	CreatedAt time.Time
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

// functionOf is the function a row of a FunctionGet (or alike) query holds.
func functionOf(r dbsqlc.FunctionGetRow) Function {
	return Function{Tenant: r.Tenant, Name: r.Name, Revision: int(r.Revision), URL: r.Url, Config: r.Config, CreatedAt: r.CreatedAt}
}

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
	b.Queue(dbsqlc.FunctionLockName, dbsqlc.FunctionLockNameParams{Tenant: tenant, Name: name}.Args()...)
	var fn *Function
	b.Queue(dbsqlc.FunctionRegister, dbsqlc.FunctionRegisterParams{Tenant: tenant, Name: name, Url: url, Config: config, TimeoutMs: timeout.Milliseconds(), RunTimeoutMs: runTimeout.Milliseconds()}.Args()...).
		QueryRow(func(row pgx.Row) error {
			var r dbsqlc.FunctionRegisterRow
			if err := row.Scan(&r.Tenant, &r.Name, &r.Revision, &r.Url, &r.Config, &r.CreatedAt); err != nil {
				return err
			}
			f := functionOf(dbsqlc.FunctionGetRow(r))
			fn = &f
			return nil
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("register function %s: %w", name, unstorable(err))
	}
	return fn, nil
}

// SyncFunction is RegisterFunction for a sync of an app: it stores a new revision only
// when url, config (compared as JSON values), timeout or runTimeout differ from the
// function's current revision, or it has none (new, or deleted); else it stores nothing
// and returns the current revision, with changed false. Concurrent syncs and
// registrations of one name are serialized as RegisterFunction's.
func SyncFunction(ctx context.Context, db DB, tenant, name, url string, config json.RawMessage, timeout, runTimeout time.Duration) (fn *Function, changed bool, err error) {
	if len(config) == 0 {
		config = json.RawMessage(`{}`)
	}
	b := &pgx.Batch{}
	b.Queue(dbsqlc.FunctionLockName, dbsqlc.FunctionLockNameParams{Tenant: tenant, Name: name}.Args()...) // as in RegisterFunction
	b.Queue(dbsqlc.FunctionSync, dbsqlc.FunctionSyncParams{Tenant: tenant, Name: name, Url: url, Config: config, TimeoutMs: timeout.Milliseconds(), RunTimeoutMs: runTimeout.Milliseconds()}.Args()...).
		QueryRow(func(row pgx.Row) error {
			var r dbsqlc.FunctionSyncRow
			if err := row.Scan(&r.Tenant, &r.Name, &r.Revision, &r.Url, &r.Config, &r.CreatedAt, &r.Changed); err != nil {
				return err
			}
			f := functionOf(dbsqlc.FunctionGetRow{Tenant: r.Tenant, Name: r.Name, Revision: r.Revision, Url: r.Url, Config: r.Config, CreatedAt: r.CreatedAt})
			fn, changed = &f, r.Changed
			return nil
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, fmt.Errorf("sync function %s: %w", name, unstorable(err))
	}
	return fn, changed, nil
}

// GetFunction returns the current revision of a registered function, or ErrNotFound.
func GetFunction(ctx context.Context, db DB, tenant, name string) (*Function, error) {
	row, err := dbsqlc.New(db).FunctionGet(ctx, dbsqlc.FunctionGetParams{Tenant: tenant, Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get function %s: %w", name, err)
	}
	fn := functionOf(row)
	return &fn, nil
}

// GetRevision returns one revision of a function, registered or since deleted, or
// ErrNotFound.
func GetRevision(ctx context.Context, db DB, tenant, name string, revision int) (*Function, error) {
	if revision < math.MinInt32 || revision > math.MaxInt32 {
		return nil, ErrNotFound // revision is an integer column
	}
	row, err := dbsqlc.New(db).FunctionGetRevision(ctx, dbsqlc.FunctionGetRevisionParams{Tenant: tenant, Name: name, Revision: int32(revision)})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get function %s revision %d: %w", name, revision, err)
	}
	fn := functionOf(dbsqlc.FunctionGetRow(row))
	return &fn, nil
}

// ListFunctions returns the current revision of every registered function, by name.
func ListFunctions(ctx context.Context, db DB, tenant string) ([]Function, error) {
	rows, err := dbsqlc.New(db).FunctionList(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list functions: %w", err)
	}
	fns := make([]Function, len(rows))
	for i, r := range rows {
		fns[i] = functionOf(dbsqlc.FunctionGetRow(r))
	}
	return fns, nil
}

// DeleteFunction unregisters a function; its revisions and runs are kept. It returns
// ErrNotFound when the function is not registered.
func DeleteFunction(ctx context.Context, db DB, tenant, name string) error {
	n, err := dbsqlc.New(db).FunctionDelete(ctx, dbsqlc.FunctionDeleteParams{Tenant: tenant, Name: name})
	if err != nil {
		return fmt.Errorf("delete function %s: %w", name, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
