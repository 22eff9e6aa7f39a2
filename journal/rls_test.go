package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/runevents"
	"github.com/stepgate/stepgate/migrations"
)

// fencedPools returns a system pool and an API pool on a new database, configured as the
// gateway configures its own (the tests connect as a superuser, as dev does).
func fencedPools(tb testing.TB, apiConns int32) (system, api *pgxpool.Pool) {
	tb.Helper()
	system, api, _ = fencedPoolsOn(tb, apiConns)
	return system, api
}

// fencedPoolsOn is fencedPools, also returning the database's URL.
func fencedPoolsOn(tb testing.TB, apiConns int32) (system, api *pgxpool.Pool, url string) {
	tb.Helper()
	url = pgtest.DBURL(tb)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(tb, err)
	cfg.MaxConns = 2
	apiCfg := cfg.Copy()
	apiCfg.MaxConns = apiConns
	journal.ConfigurePool(cfg, true)
	journal.ConfigurePool(apiCfg, false)
	system, err = pgxpool.NewWithConfig(tb.Context(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(system.Close)
	api, err = pgxpool.NewWithConfig(tb.Context(), apiCfg)
	require.NoError(tb, err)
	tb.Cleanup(api.Close)
	return system, api, url
}

// tenantData is what one tenant owns in every tenant-owned table.
type tenantData struct {
	tenant string
	run    *journal.Run
}

// mustFillTenant gives tenant a function, a run with a journal entry and a failed
// invocation, and a watch, written through the system pool as the invoker would.
func mustFillTenant(t *testing.T, system *pgxpool.Pool, tenant string) tenantData {
	t.Helper()
	ctx := t.Context()
	mustRegister(t, system, tenant, "fn")
	run := mustCreateRunOf(t, system, tenant, "fn", claimed)
	require.NoError(t, journal.AppendEntry(ctx, system, run.ID, run.Invocation, step(1, "charge", `1`), journal.Bounds{}))
	_, err := journal.Finish(ctx, system, run.ID, run.Invocation, journal.RetryingInvocation(journal.ErrorInfo{Type: "timeout", Message: "slow"}, time.Hour))
	require.NoError(t, err)
	require.NoError(t, runevents.Watch(ctx, system, "gateway-1", []string{tenant}, time.Minute))
	return tenantData{tenant: tenant, run: run}
}

// tenantTables are the tenant-owned tables, each with the query that lists the tenants
// of its rows with no tenant filter of its own: the query that forgot the filter.
var tenantTables = map[string]string{
	"function":          `SELECT tenant FROM stepgate.function`,
	"function_revision": `SELECT tenant FROM stepgate.function_revision`,
	"run":               `SELECT tenant FROM stepgate.run`,
	"journal_entry":     `SELECT tenant FROM stepgate.journal_entry`,
	"attempt_failure":   `SELECT tenant FROM stepgate.attempt_failure`,
	"run_watch":         `SELECT tenant FROM stepgate.run_watch`,
}

// tenantsIn returns the tenants of the rows sql (one of tenantTables) sees through db.
func tenantsIn(t *testing.T, db journal.DB, sql string) []*string {
	t.Helper()
	rows, _ := db.Query(t.Context(), sql)
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	require.NoError(t, err, sql)
	return tenants
}

func TestRowLevelSecurity(t *testing.T) {
	t.Parallel()
	system, api := fencedPools(t, 2)
	a := mustFillTenant(t, system, newTenant())
	b := mustFillTenant(t, system, newTenant())
	const rlsViolation = "42501" // insufficient_privilege: "new row violates row-level security policy"

	t.Run("ConnectionsActAsTheirRoles", func(t *testing.T) {
		t.Parallel()
		for role, pool := range map[string]*pgxpool.Pool{journal.SystemRole: system, journal.AppRole: api} {
			var current, session string
			var super bool
			require.NoError(t, pool.QueryRow(t.Context(), `
				SELECT current_user, session_user, (SELECT rolsuper FROM pg_roles WHERE rolname = session_user)`,
			).Scan(&current, &session, &super))
			require.Equal(t, role, current)
			require.True(t, super, "the tests log in as a superuser, whom row-level security would not stop")
			fence, err := journal.CheckFence(t.Context(), pool)
			require.NoError(t, err)
			require.Equal(t, journal.Fence{User: role, Bypassed: false}, fence)
		}
	})

	t.Run("AQueryThatForgotTheTenantFilterSeesOnlyItsTenant", func(t *testing.T) {
		t.Parallel()
		db := journal.ForTenant(api, b.tenant)
		for table, sql := range tenantTables {
			tenants := tenantsIn(t, db, sql)
			require.NotEmpty(t, tenants, table)
			for _, tenant := range tenants {
				require.NotNil(t, tenant, "%s: a row whose run is hidden", table)
				require.Equal(t, b.tenant, *tenant, "%s: another tenant's row", table)
			}
		}
		var n int
		require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.journal_entry WHERE run_id = $1`, a.run.ID).Scan(&n))
		require.Zero(t, n, "another tenant's journal, by its run id")
	})

	t.Run("TheGoFilterIsNotTheOnlyFence", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := journal.ForTenant(api, b.tenant)
		// Tenant b's handle, asking in Go for tenant a's rows.
		_, err := journal.GetRun(ctx, db, a.tenant, a.run.ID)
		require.ErrorIs(t, err, journal.ErrNotFound)
		runs, _, err := journal.ListRuns(ctx, db, a.tenant, journal.RunFilter{})
		require.NoError(t, err)
		require.Empty(t, runs)
		_, err = journal.GetFunction(ctx, db, a.tenant, "fn")
		require.ErrorIs(t, err, journal.ErrNotFound)
		_, err = journal.Attach(ctx, db, a.tenant, a.run.ID)
		require.ErrorIs(t, err, journal.ErrNotFound)
		require.Empty(t, mustEntries(t, db, a.run.ID))
		require.Empty(t, mustFailures(t, db, a.run.ID))
		// While the tenant's own handle finds them.
		own := journal.ForTenant(api, a.tenant)
		run, err := journal.GetRun(ctx, own, a.tenant, a.run.ID)
		require.NoError(t, err)
		require.Equal(t, a.run.ID, run.ID)
		require.Len(t, mustEntries(t, own, a.run.ID), 1)
		require.Len(t, mustFailures(t, own, a.run.ID), 1)
	})

	t.Run("WritesToAnotherTenantAreRefused", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := journal.ForTenant(api, b.tenant)
		for _, c := range []struct {
			sql string
			arg string
		}{
			{`UPDATE stepgate.run SET notify = true WHERE id = $1`, a.run.ID},
			{`DELETE FROM stepgate.function WHERE tenant = $1`, a.tenant},
			{`UPDATE stepgate.run_watch SET expires_at = now() WHERE tenant = $1`, a.tenant},
		} {
			tag, err := db.Exec(ctx, c.sql, c.arg)
			require.NoError(t, err, c.sql)
			require.Zero(t, tag.RowsAffected(), "%s: another tenant's rows are invisible", c.sql)
		}
		for _, sql := range []string{
			`INSERT INTO stepgate.function_revision (tenant, name, revision, url, timeout_ms) VALUES ($1, 'evil', 1, 'http://x/', 1000)`,
			`INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
				VALUES (gen_random_uuid(), $1, 'fn', 1, 'queued', '{}', '{}')`,
			`INSERT INTO stepgate.run_watch (gateway_id, tenant, expires_at) VALUES ('g', $1, now())`,
		} {
			_, err := db.Exec(ctx, sql, a.tenant)
			requirePgError(t, err, rlsViolation, sql)
		}
		const fkViolation = "23503"
		for _, sql := range []string{
			`INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, invocation) VALUES ($1, $2, 2, 'step', 'evil', 1)`,
			`INSERT INTO stepgate.attempt_failure (tenant, run_id, seq, attempt, error) VALUES ($1, $2, 0, 9, '{}')`,
		} {
			_, err := db.Exec(ctx, sql, a.tenant, a.run.ID)
			requirePgError(t, err, rlsViolation, sql)
			// Under its own tenant, a row of another tenant's run is refused too: its key
			// names a run of its tenant (the foreign key is on both).
			_, err = db.Exec(ctx, sql, b.tenant, a.run.ID)
			requirePgError(t, err, fkViolation, sql)
		}
		// Moving its own run to another tenant is refused too (the policy checks the
		// updated row).
		_, err := db.Exec(ctx, `UPDATE stepgate.run SET tenant = $1 WHERE id = $2`, a.tenant, b.run.ID)
		requirePgError(t, err, rlsViolation, "move a run")
		// And through the package's own writes.
		err = journal.AppendEntry(ctx, db, a.run.ID, a.run.Invocation, step(2, "evil", `1`), journal.Bounds{})
		require.ErrorIs(t, err, journal.ErrSuperseded, "the run is invisible, so the invocation owns nothing")
		_, err = journal.CancelRun(ctx, db, a.tenant, a.run.ID, journal.Identity{Subject: "b"})
		require.ErrorIs(t, err, journal.ErrNotFound)
		require.Equal(t, journal.StatusQueued, mustGetRun(t, system, a.run).Status)
	})

	t.Run("NoTenantSeesNothing", func(t *testing.T) {
		t.Parallel()
		for table, sql := range tenantTables {
			require.Empty(t, tenantsIn(t, api, sql), "%s with no tenant set", table)
		}
		_, err := api.Exec(t.Context(), `INSERT INTO stepgate.run_watch (gateway_id, tenant, expires_at) VALUES ('g', $1, now())`, a.tenant)
		requirePgError(t, err, rlsViolation, "write with no tenant set")
	})

	t.Run("TheSystemPoolSeesEveryTenant", func(t *testing.T) {
		t.Parallel()
		for table, sql := range tenantTables {
			seen := map[string]bool{}
			for _, tenant := range tenantsIn(t, system, sql) {
				require.NotNil(t, tenant, table)
				seen[*tenant] = true
			}
			require.True(t, seen[a.tenant] && seen[b.tenant], "%s: %v", table, seen)
		}
	})

	t.Run("EmptyTenantsAreRefused", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		for _, tenant := range []string{"", "a\x00b"} {
			db := journal.ForTenant(api, tenant)
			_, err := journal.GetRun(ctx, db, a.tenant, a.run.ID)
			require.ErrorIs(t, err, journal.ErrInvalidTenant, "%q", tenant)
			_, err = db.Exec(ctx, `SELECT 1`)
			require.ErrorIs(t, err, journal.ErrInvalidTenant)
			require.ErrorIs(t, db.SendBatch(ctx, &pgx.Batch{}).Close(), journal.ErrInvalidTenant)
			_, err = db.Begin(ctx)
			require.ErrorIs(t, err, journal.ErrInvalidTenant)
		}
	})

	t.Run("NoTenantNameSeesMore", func(t *testing.T) {
		t.Parallel()
		for _, tenant := range []string{"*", "%", "' OR true --"} {
			require.Empty(t, tenantsIn(t, journal.ForTenant(api, tenant), tenantTables["run"]), "%q", tenant)
		}
	})

	t.Run("ATenantNameIsALiteral", func(t *testing.T) {
		t.Parallel()
		// Quotes that would end the literal of Begin's set_config and set b's tenant.
		evil := `x', true); SELECT set_config('stepgate.tenant', '` + b.tenant
		err := pgx.BeginFunc(t.Context(), journal.ForTenant(api, evil), func(tx pgx.Tx) error {
			var setting string
			if err := tx.QueryRow(t.Context(), `SELECT current_setting('stepgate.tenant')`).Scan(&setting); err != nil {
				return err
			}
			require.Equal(t, evil, setting)
			require.Empty(t, tenantsIn(t, tx, tenantTables["run"]))
			return nil
		})
		require.NoError(t, err)
	})
}

// TestForTenant checks the handle itself: the tenant it sets reaches every kind of
// statement, and it never outlives the statement's transaction on a pooled connection.
func TestForTenant(t *testing.T) {
	t.Parallel()
	// One connection, so every use below gets the connection the previous one used.
	system, api := fencedPools(t, 1)
	a := mustFillTenant(t, system, newTenant())
	db := journal.ForTenant(api, a.tenant)

	// leftover returns what the API pool's connection carries between uses.
	leftover := func(t *testing.T) (setting *string, visible int) {
		t.Helper()
		require.NoError(t, api.QueryRow(t.Context(),
			`SELECT nullif(current_setting('stepgate.tenant', true), ''), (SELECT count(*) FROM stepgate.run)`,
		).Scan(&setting, &visible))
		return setting, visible
	}
	requireClean := func(t *testing.T, after string) {
		t.Helper()
		setting, visible := leftover(t)
		require.Nil(t, setting, "the tenant outlived %s", after)
		require.Zero(t, visible, "runs visible after %s", after)
	}
	requireClean(t, "nothing")

	t.Run("QueryAndQueryRow", func(t *testing.T) {
		run, err := journal.GetRun(t.Context(), db, a.tenant, a.run.ID) // Query
		require.NoError(t, err)
		require.Equal(t, a.run.ID, run.ID)
		requireClean(t, "Query")
		var n int
		require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run`).Scan(&n))
		require.Equal(t, 1, n)
		requireClean(t, "QueryRow")
		err = db.QueryRow(t.Context(), `SELECT 1 FROM stepgate.run WHERE false`).Scan(&n)
		require.ErrorIs(t, err, pgx.ErrNoRows)
		requireClean(t, "QueryRow with no row")
	})

	t.Run("Exec", func(t *testing.T) {
		tag, err := db.Exec(t.Context(), `UPDATE stepgate.run SET notify = notify WHERE true`)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
		requireClean(t, "Exec")
	})

	t.Run("SendBatch", func(t *testing.T) {
		fn := mustRegister(t, db, a.tenant, "other") // a batch with callbacks
		require.Equal(t, 1, fn.Revision)
		requireClean(t, "a batch with callbacks")

		b := &pgx.Batch{}
		b.Queue(`SELECT count(*) FROM stepgate.run`)
		b.Queue(`SELECT current_setting('stepgate.tenant')`)
		br := db.SendBatch(t.Context(), b)
		var n int
		var setting string
		require.NoError(t, br.QueryRow().Scan(&n), "the first result is the caller's first statement")
		require.NoError(t, br.QueryRow().Scan(&setting))
		require.NoError(t, br.Close())
		require.Equal(t, 1, n)
		require.Equal(t, a.tenant, setting)
		requireClean(t, "a batch read by hand")
	})

	t.Run("Begin", func(t *testing.T) {
		for i, commit := range []bool{true, false} {
			tx, err := db.Begin(t.Context())
			require.NoError(t, err)
			defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // a no-op once ended
			var n int
			require.NoError(t, tx.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run`).Scan(&n))
			require.Equal(t, 1+i, n, "the tenant's runs, committed")
			_, _, err = journal.CreateRun(t.Context(), tx, journal.NewRun{
				ID: newID(), Tenant: a.tenant, Function: "fn", Input: json.RawMessage(`{}`), Identity: journal.Identity{Tenant: a.tenant},
			})
			require.NoError(t, err)
			if commit {
				require.NoError(t, tx.Commit(t.Context()))
			} else {
				require.NoError(t, tx.Rollback(t.Context()))
			}
			requireClean(t, "a transaction")
		}
		runs, _, err := journal.ListRuns(t.Context(), db, a.tenant, journal.RunFilter{})
		require.NoError(t, err)
		require.Len(t, runs, 2, "the committed run, not the rolled back one")
	})

	t.Run("BeginWhateverTheFirstStatement", func(t *testing.T) {
		// The tenant rides with the transaction's first statement, whichever kind it is,
		// and holds for the rest of it.
		first := map[string]func(tx pgx.Tx) error{
			"Exec": func(tx pgx.Tx) error {
				_, err := tx.Exec(t.Context(), `UPDATE stepgate.run SET notify = notify WHERE false`)
				return err
			},
			"SendBatch": func(tx pgx.Tx) error {
				b := &pgx.Batch{}
				b.Queue(`SELECT 1`)
				return tx.SendBatch(t.Context(), b).Close()
			},
			"Savepoint": func(tx pgx.Tx) error {
				sp, err := tx.Begin(t.Context())
				if err != nil {
					return err
				}
				return sp.Commit(t.Context())
			},
			"Prepare": func(tx pgx.Tx) error {
				_, err := tx.Prepare(t.Context(), "", `SELECT 1`)
				return err
			},
		}
		for name, do := range first {
			err := pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
				if err := do(tx); err != nil {
					return err
				}
				var setting string
				var n int
				if err := tx.QueryRow(t.Context(), `SELECT current_setting('stepgate.tenant'), (SELECT count(*) FROM stepgate.run)`).Scan(&setting, &n); err != nil {
					return err
				}
				require.Equal(t, a.tenant, setting, name)
				require.Positive(t, n, name)
				return nil
			})
			require.NoError(t, err, name)
			requireClean(t, "a transaction begun with "+name)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		ctx := t.Context()
		_, err := db.Exec(ctx, `SELECT 1/0`)
		requirePgError(t, err, "22012", "Exec")
		requireClean(t, "a failed Exec")
		rows, _ := db.Query(ctx, `SELECT 1/0`)
		_, err = pgx.CollectRows(rows, pgx.RowTo[int])
		requirePgError(t, err, "22012", "Query")
		requireClean(t, "a failed Query")
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		b.Queue(`SELECT 1/0`)
		requirePgError(t, db.SendBatch(ctx, b).Close(), "22012", "SendBatch")
		requireClean(t, "a failed batch")
		// A transaction left open is closed by the pool, not reused.
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1/0`)
		requirePgError(t, err, "22012", "in a transaction")
		require.NoError(t, tx.Rollback(ctx))
		requireClean(t, "a failed transaction")
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		_, err = db.Exec(canceled, `SELECT 1`)
		require.ErrorIs(t, err, context.Canceled)
		requireClean(t, "a canceled Exec")
	})
}

// TestSchemaIsFenced checks that every table of the schema is fenced, so a table added
// later cannot be forgotten: row-level security enabled and forced, and a policy. And
// that the application role cannot step around it.
func TestSchemaIsFenced(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	rows, _ := db.Query(t.Context(), `
		SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
			EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND to_regrole($1) = ANY (p.polroles)),
			EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND to_regrole($2) = ANY (p.polroles)),
			has_table_privilege($1, c.oid, 'SELECT'), has_table_privilege($2, c.oid, 'SELECT')
		FROM pg_class c
		WHERE c.relnamespace = 'stepgate'::regnamespace AND c.relkind IN ('r', 'p')
		ORDER BY 1`, journal.AppRole, journal.SystemRole)
	type table struct {
		Name                      string
		Enabled, Forced           bool
		AppPolicy, SystemPolicy   bool
		AppGranted, SystemGranted bool
	}
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[table])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	// The gateway's own keys are the system role's alone: no query of the API pool can
	// read a private key, whatever its tenant filter.
	systemOnly := map[string]bool{"invocation_key": true, "signing_key": true, "callback_key": true}
	for _, tb := range tables {
		if tb.Name == "schema_migration" {
			// The migrations' own: the system role reads it (GET /readyz compares it
			// with the build's migrations, 0034); the API pool's role has no access.
			require.False(t, tb.AppGranted)
			require.True(t, tb.SystemGranted)
			continue
		}
		require.True(t, tb.Enabled && tb.Forced && tb.SystemPolicy && tb.SystemGranted,
			"stepgate.%s: every table needs ENABLE and FORCE ROW LEVEL SECURITY, and a policy for and a grant to %s (see docs/schema.md, Tenant isolation): %+v", tb.Name, journal.SystemRole, tb)
		if systemOnly[tb.Name] {
			require.False(t, tb.AppPolicy || tb.AppGranted, "stepgate.%s holds secrets: no grant or policy for %s", tb.Name, journal.AppRole)
			continue
		}
		require.True(t, tb.AppPolicy && tb.AppGranted, "stepgate.%s: a policy for and a grant to %s (see docs/schema.md, Tenant isolation): %+v", tb.Name, journal.AppRole, tb)
	}
	require.Len(t, systemOnly, func() int {
		n := 0
		for _, tb := range tables {
			if systemOnly[tb.Name] {
				n++
			}
		}
		return n
	}(), "every system-only table exists")

	for _, role := range []string{journal.AppRole, journal.SystemRole} {
		var super, bypass, owns bool
		require.NoError(t, db.QueryRow(t.Context(), `
			SELECT rolsuper, rolbypassrls, EXISTS (SELECT 1 FROM pg_class WHERE relowner = r.oid)
			FROM pg_roles r WHERE rolname = $1`, role).Scan(&super, &bypass, &owns))
		require.False(t, super || bypass || owns, "%s must be fenced: superuser %v, bypassrls %v, owns tables %v", role, super, bypass, owns)
	}

	var riverFenced bool
	require.NoError(t, db.QueryRow(t.Context(), `SELECT relrowsecurity FROM pg_class WHERE oid = 'river_job'::regclass`).Scan(&riverFenced))
	require.False(t, riverFenced, "River's tables stay unfenced")
}

// TestPoliciesKeepPlans checks that row-level security does not skew the planner: the
// API pool's estimate of a tenant's runs is the system pool's, not a fraction of it, so
// a page of runs still walks an index instead of reading and sorting all of them (an
// OR in the policy, such as a '*' escape, would count the tenant's selectivity twice).
func TestPoliciesKeepPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	system, api, url := fencedPoolsOn(t, 1)
	tenants := []string{newTenant(), newTenant(), newTenant(), newTenant()}
	for _, tenant := range tenants {
		mustRegister(t, system, tenant, "fn")
		mustExec(t, system, `
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
			SELECT gen_random_uuid(), $1, 'fn', 1, 'queued', '{}', '{}' FROM generate_series(1, 200)`, tenant)
	}
	owner, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer owner.Close(context.WithoutCancel(ctx))
	_, err = owner.Exec(ctx, `ANALYZE stepgate.run`)
	require.NoError(t, err)

	estimate := func(db journal.DB) float64 {
		t.Helper()
		var plan []struct {
			Plan struct {
				Rows float64 `json:"Plan Rows"`
			} `json:"Plan"`
		}
		require.NoError(t, db.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT id FROM stepgate.run WHERE tenant = $1`, tenants[0]).Scan(&plan))
		return plan[0].Plan.Rows
	}
	fenced, open := estimate(journal.ForTenant(api, tenants[0])), estimate(system)
	require.InDelta(t, 200, open, 100)
	require.InDelta(t, open, fenced, open/4, "the policy shrank the estimate of the tenant's runs")
}

// TestMigratedByANonSuperuser checks a deployment with no superuser: a user that owns the
// database and may create roles migrates it, which makes it a member of both roles, so
// that its pools act as them and row-level security applies.
func TestMigratedByANonSuperuser(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.EmptyDBURL(t)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(context.WithoutCancel(ctx))
	user := pgtest.NewRole(t, url, "stepgate_owner", "CREATEROLE")
	dbName := pgx.Identifier{admin.Config().Database}.Sanitize()
	_, err = admin.Exec(ctx, `ALTER DATABASE `+dbName+` OWNER TO `+user)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.User = user
	cfg.MaxConns = 2
	owner, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer owner.Close()
	require.NoError(t, migrations.Up(ctx, owner))

	for _, system := range []bool{true, false} {
		pc := cfg.Copy()
		journal.ConfigurePool(pc, system)
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		require.NoError(t, err)
		fence, err := journal.CheckFence(ctx, pool)
		pool.Close()
		require.NoError(t, err)
		want := journal.AppRole
		if system {
			want = journal.SystemRole
		}
		require.Equal(t, journal.Fence{User: want}, fence)
	}

	pools := map[bool]*pgxpool.Pool{}
	for _, system := range []bool{true, false} {
		pc := cfg.Copy()
		journal.ConfigurePool(pc, system)
		pools[system], err = pgxpool.NewWithConfig(ctx, pc)
		require.NoError(t, err)
		defer pools[system].Close()
	}
	system, api := pools[true], pools[false]
	tenant := newTenant()
	mustRegister(t, system, tenant, "fn")
	mustCreateRunOf(t, system, tenant, "fn")
	count := func(db journal.DB) (n int) {
		t.Helper()
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM stepgate.run`).Scan(&n))
		return n
	}
	require.Equal(t, 1, count(system))
	require.Zero(t, count(api))
	require.Equal(t, 1, count(journal.ForTenant(api, tenant)))
	require.Zero(t, count(journal.ForTenant(api, newTenant())))
}

// requirePgError requires err to be the Postgres error code.
func requirePgError(t *testing.T, err error, code, msg string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want Postgres error %s, got %v", msg, code, err)
	require.Equal(t, code, pgErr.Code, "%s: %s", msg, pgErr.Message)
}

// BenchmarkGetRun compares a read through the API pool's tenant handle (a batch of the
// tenant's set_config and the query, under row-level security) with the same read on a
// plain superuser pool.
func BenchmarkGetRun(b *testing.B) {
	system, api := fencedPools(b, 2)
	plain := pgtest.DB(b)
	tenant := newTenant()
	mustRegister(b, system, tenant, "fn")
	run := mustCreateRunOf(b, system, tenant, "fn")
	plainRun := mustCreateRun(b, plain)
	for _, c := range []struct {
		name string
		db   journal.DB
		run  *journal.Run
	}{
		{"Plain", plain, plainRun},
		{"ForTenant", journal.ForTenant(api, tenant), run},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := journal.GetRun(b.Context(), c.db, c.run.Tenant, c.run.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
