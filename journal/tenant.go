package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Tenant isolation has two fences. Every query of this package filters by tenant; and
// Postgres row-level security (docs/schema.md, Tenant isolation) shows a connection acting as AppRole
// only the rows of the tenant in its setting (tenantSetting), so a query that forgot its
// filter still sees nothing of another tenant.
//
// The gateway holds two pools, both configured by ConfigurePool: a system pool, whose
// connections act as SystemRole and see every tenant (the invoker, River, checkpoints:
// they work by run id), and an API pool, whose connections act as AppRole and see no
// tenant until ForTenant sets one for a single transaction.

const (
	// tenantSetting is the Postgres setting that AppRole's row-level security
	// policies compare each row's tenant with.
	tenantSetting = "stepgate.tenant"
	// AppRole is the role of the API pool's connections, created by the migrations:
	// it sees one tenant, the one in tenantSetting.
	AppRole = "stepgate_app"
	// SystemRole is the role of the system pool's connections, created by the
	// migrations: it sees every tenant.
	SystemRole = "stepgate_system"
)

// errInvalidTenant is returned by every operation of a ForTenant handle whose tenant is
// empty (or holds a NUL byte, which Postgres text cannot).
var errInvalidTenant = errors.New("journal: the tenant is empty")

// ConfigurePool makes each new connection of cfg act as SystemRole (system) or AppRole
// (not system) when its database user may (it is a member of the role, as the
// migrations make the user that runs them, or a superuser), so that row-level security
// applies even to a superuser. A system pool sees every tenant; an API pool sees none
// until ForTenant sets one for a transaction. It costs one round trip per new
// connection and none per statement; CheckFence tells whether the switch happened. It
// keeps any AfterConnect of cfg, run first.
//
// The connections must keep their session (a pooler in transaction mode would lose the
// role: see ActAsAppPerTransaction instead). Migrations must not run on such a pool: they
// run as the database user.
func ConfigurePool(cfg *pgxpool.Config, system bool) {
	role := AppRole
	if system {
		role = SystemRole
	}
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if next != nil {
			if err := next(ctx, conn); err != nil {
				return err
			}
		}
		if err := dbsqlc.New(conn).TenantActAs(ctx, role); err != nil {
			return fmt.Errorf("journal: act as %s: %w", role, err)
		}
		return nil
	}
}

// Behind a pooler in transaction mode (PgBouncer's pool_mode=transaction), a client's
// connection is not a server's: each transaction may run on another server connection,
// so what ConfigurePool sets for the session would land on one server connection and
// be missing from (or leak into) the others. There the pooler sets the system role on
// each server connection it opens (PgBouncer's connect_query; see docs/operations.md,
// "Behind PgBouncer"), ConfigurePool is not used, and an API pool is marked with
// ActAsAppPerTransaction: its ForTenant handles then set AppRole with the tenant, both
// transaction-local, in the one statement that sets the tenant.

// perTransaction holds the pools marked by ActAsAppPerTransaction; pooled counts them,
// so that ForTenant looks at the map only when some pool is marked.
var (
	perTransaction sync.Map // *pgxpool.Pool → struct{}
	pooled         atomic.Int32
)

// tenantSetAs sets AppRole and the tenant for the transaction (set_config with
// is_local): SET LOCAL ROLE checks that the session user is a member of the role, as
// ConfigurePool's switch does.
const tenantSetAs = `SELECT set_config('role', '` + AppRole + `', true), set_config('` + tenantSetting + `', $1, true)`

// ActAsAppPerTransaction marks pool, an API pool whose connections go through a pooler
// in transaction mode and whose session role is not AppRole, so that each statement and
// transaction of ForTenant(pool, ...) acts as AppRole, set with the tenant at no extra
// round trip. Use it instead of ConfigurePool for such a pool. The mark outlives the
// pool; a process makes such pools once.
func ActAsAppPerTransaction(pool *pgxpool.Pool) {
	if _, loaded := perTransaction.LoadOrStore(pool, struct{}{}); !loaded {
		pooled.Add(1)
	}
}

// fence is how row-level security applies to a pool's connections; see CheckFence.
type fence struct {
	User string // current_user: AppRole or SystemRole once ConfigurePool switched.
	// Bypassed is true when the user is a superuser or has BYPASSRLS: row-level
	// security does not apply and only the queries' own tenant filters isolate tenants.
	Bypassed bool
}

// CheckFence reports how row-level security applies to db's connections, so that the
// gateway can refuse to start, or warn, when its pools are not fenced.
func CheckFence(ctx context.Context, db DB) (fence, error) {
	row, err := dbsqlc.New(db).TenantCheckFence(ctx)
	if err == nil && row.Bypassed == nil {
		err = fmt.Errorf("%s has no rolsuper or rolbypassrls", row.UserName)
	}
	if err != nil {
		return fence{}, fmt.Errorf("check row-level security: %w", err)
	}
	return fence{User: row.UserName, Bypassed: *row.Bypassed}, nil
}

// TenantDB is a DB whose every statement sees only one tenant's rows; see ForTenant.
type TenantDB struct {
	pool   *pgxpool.Pool
	tenant string
	setSQL string // the statement that sets the tenant (and AppRole: ActAsAppPerTransaction)
	err    error  // errInvalidTenant, returned by every operation
}

var _ DB = (*TenantDB)(nil)

// ForTenant returns a handle on pool (an API pool, see ConfigurePool) that scopes each
// statement to tenant: Exec, Query, QueryRow and SendBatch send the tenant's
// set_config(..., true) and the statement in one batch, which Postgres runs as one
// implicit transaction, so a statement costs no extra round trip; Begin starts an
// explicit transaction whose first statement carries the tenant's setting. The setting
// is transaction-local, so a connection goes back to the pool with no tenant: a
// connection released inside a transaction is closed by the pool.
//
// An empty tenant is refused: every operation returns errInvalidTenant. Leading
// QueryExecMode arguments are not supported (a leading QueryRewriter such as
// pgx.NamedArgs is: the statement goes through a batch, which rewrites it), nor batches begun with
// Batch.BeginTx (use Begin).
func ForTenant(pool *pgxpool.Pool, tenant string) *TenantDB {
	t := &TenantDB{pool: pool, tenant: tenant, setSQL: dbsqlc.TenantSet}
	if pooled.Load() > 0 {
		if _, ok := perTransaction.Load(pool); ok {
			t.setSQL = tenantSetAs
		}
	}
	if tenant == "" || strings.ContainsRune(tenant, 0) {
		t.err = errInvalidTenant
	}
	return t
}

// Tenant returns the tenant the handle is scoped to.
func (t *TenantDB) Tenant() string { return t.tenant }

// Exec runs sql for the tenant.
func (t *TenantDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.err != nil {
		return pgconn.CommandTag{}, t.err
	}
	return scopedExec(ctx, t.pool, t.setSQL, t.tenant, sql, args...)
}

// Query runs sql for the tenant. As with pgx, an error also comes back from the rows'
// Err, so callers may ignore the returned one.
func (t *TenantDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.err != nil {
		return &errRows{err: t.err}, t.err
	}
	return scopedQuery(ctx, t.pool, t.setSQL, t.tenant, sql, args...)
}

// QueryRow runs sql for the tenant; see pgx.Conn.QueryRow.
func (t *TenantDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := t.Query(ctx, sql, args...) // the error resurfaces in Scan
	return row{rows}
}

// SendBatch runs b for the tenant, in one implicit transaction as a batch outside an
// explicit one always does. The results are those of b's statements only.
func (t *TenantDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.err != nil {
		return errBatchResults{t.err}
	}
	return scopedBatch(ctx, t.pool, t.setSQL, t.tenant, b)
}

// Begin starts a transaction that sees only the tenant's rows. Use it with
// pgx.BeginFunc. BEGIN takes its round trip, as any transaction's does; the tenant's
// set_config rides with the transaction's first statement (see tenantTx), so a
// transaction costs no round trip more than it would without a tenant.
func (t *TenantDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.err != nil {
		return nil, t.err
	}
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &tenantTx{Tx: tx, tenant: t.tenant, setSQL: t.setSQL}, nil
}

// tenantTx is a transaction of a TenantDB: its first Exec, Query, QueryRow or SendBatch
// sends the tenant's set_config and the statement in one batch; the setting is
// transaction-local, so it holds for the rest of the transaction (savepoints
// included). Its other methods set the tenant first, in a round trip of its own.
type tenantTx struct {
	pgx.Tx
	tenant string
	setSQL string // see TenantDB
	set    bool
}

func (tx *tenantTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if tx.set {
		return tx.Tx.Exec(ctx, sql, args...)
	}
	tx.set = true
	return scopedExec(ctx, tx.Tx, tx.setSQL, tx.tenant, sql, args...)
}

func (tx *tenantTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if tx.set {
		return tx.Tx.Query(ctx, sql, args...)
	}
	tx.set = true
	return scopedQuery(ctx, tx.Tx, tx.setSQL, tx.tenant, sql, args...)
}

func (tx *tenantTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := tx.Query(ctx, sql, args...) // the error resurfaces in Scan
	return row{rows}
}

func (tx *tenantTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if tx.set {
		return tx.Tx.SendBatch(ctx, b)
	}
	tx.set = true
	return scopedBatch(ctx, tx.Tx, tx.setSQL, tx.tenant, b)
}

// ensure sets the tenant, if no statement has yet.
func (tx *tenantTx) ensure(ctx context.Context) error {
	if tx.set {
		return nil
	}
	if _, err := tx.Tx.Exec(ctx, tx.setSQL, dbsqlc.TenantSetParams{Tenant: tx.tenant}.Args()...); err != nil {
		return fmt.Errorf("set tenant: %w", err)
	}
	tx.set = true
	return nil
}

func (tx *tenantTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := tx.ensure(ctx); err != nil {
		return nil, err
	}
	return tx.Tx.Begin(ctx)
}

func (tx *tenantTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := tx.ensure(ctx); err != nil {
		return 0, err
	}
	return tx.Tx.CopyFrom(ctx, table, columns, src)
}

func (tx *tenantTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := tx.ensure(ctx); err != nil {
		return nil, err
	}
	return tx.Tx.Prepare(ctx, name, sql)
}

// batchSender is a pool, a connection or a transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// scopedBatch sends b's statements to db after setSQL (dbsqlc.TenantSet or tenantSetAs)
// sets the tenant, in one batch. The results are those of b's statements only.
func scopedBatch(ctx context.Context, db batchSender, setSQL, tenant string, b *pgx.Batch) pgx.BatchResults {
	tb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	tb.Queue(setSQL, dbsqlc.TenantSetParams{Tenant: tenant}.Args()...)
	tb.QueuedQueries = append(tb.QueuedQueries, b.QueuedQueries...)
	br := db.SendBatch(ctx, tb)
	if _, err := br.Exec(); err != nil {
		_ = br.Close() // the error is err
		return errBatchResults{fmt.Errorf("set tenant: %w", err)}
	}
	return br
}

// scopedExec runs sql on db after the tenant's set_config, in one batch.
func scopedExec(ctx context.Context, db batchSender, setSQL, tenant, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := scopedBatch(ctx, db, setSQL, tenant, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// scopedQuery runs sql on db after the tenant's set_config, in one batch; closing the
// rows closes the batch.
func scopedQuery(ctx context.Context, db batchSender, setSQL, tenant, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := scopedBatch(ctx, db, setSQL, tenant, b)
	rows, err := br.Query()
	if err != nil {
		rows.Close()
		_ = br.Close() // the error is err
		return &errRows{err: err}, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of a statement in a batch; closing them closes the batch,
// which releases the connection.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	err    error // from closing the batch
	closed bool
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// row is pgx's QueryRow over any Rows.
type row struct{ rows pgx.Rows }

func (r row) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRows are the rows of a query that failed before it ran.
type errRows struct{ err error }

func (r *errRows) Close()                                       {}
func (r *errRows) Err() error                                   { return r.err }
func (r *errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *errRows) Next() bool                                   { return false }
func (r *errRows) Scan(...any) error                            { return r.err }
func (r *errRows) Values() ([]any, error)                       { return nil, r.err }
func (r *errRows) RawValues() [][]byte                          { return nil }
func (r *errRows) Conn() *pgx.Conn                              { return nil }
func (r *errRows) TypeMap() *pgtype.Map                         { return nil }

// errBatchResults are the results of a batch that failed before it ran.
type errBatchResults struct{ err error }

func (b errBatchResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatchResults) Query() (pgx.Rows, error)         { return &errRows{err: b.err}, b.err }
func (b errBatchResults) QueryRow() pgx.Row                { return row{&errRows{err: b.err}} }
func (b errBatchResults) Close() error                     { return b.err }
func (b errBatchResults) Tx() pgx.Tx                       { return nil }
