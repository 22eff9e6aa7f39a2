package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/migrations"
)

// idOnlyLookups are the unique indexes of tables with a tenant column that do not lead
// with it, each with why a statement finds the row without its tenant. They keep the id
// (or the token's hash) unique over every tenant, so such a lookup finds at most the one
// row, never another tenant's. A database sharded by tenant could not hold them: there
// the lookups would carry the tenant (docs/schema.md#ready-to-shard-by-tenant).
var idOnlyLookups = map[string]string{
	"run_id_lookup":              "a claim (its job's run id), a checkpoint (its token's run id), the finish and the lease renewals find a run by id",
	"operation_id_lookup":        "a bulk cancel's job (CancelOperationArgs) holds only its operation's id",
	"schedule_id_lookup":         "a schedule's tick (TickArgs, OverdueTicks) holds only the schedule's id",
	"callback_token_hash_lookup": "a callback's URL carries its token and no tenant (CallbackByToken)",
}

// notTenantRows are the tables of schema stepgate without a tenant column, each with why
// its rows belong to no tenant.
var notTenantRows = map[string]string{
	"callback_key":     "the deployment's one secret for callback tokens",
	"invocation_key":   "the deployment's keys for invocation tokens, shared by every gateway",
	"schema_migration": "the migrations this database applied",
}

// TestEveryTenantTableIsKeyedByTenant: on a migrated database, every table of schema
// stepgate with a tenant column has a primary key whose first column is tenant, and every
// unique index of it leads with tenant too, but the id-only lookups of idOnlyLookups; the
// tables without a tenant column are those of notTenantRows. So a database sharded by
// tenant can hold every tenant's rows co-located once those lookups carry the tenant.
func TestEveryTenantTableIsKeyedByTenant(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tx := pgtest.Tx(t)

	rows, _ := tx.Query(ctx, `
		SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND a.attnum > 0 AND NOT a.attisdropped)
		FROM pg_class c WHERE c.relnamespace = 'stepgate'::regnamespace AND c.relkind IN ('r', 'p')
		ORDER BY 1`)
	tenantTables := map[string]bool{}
	others := map[string]string{}
	var table string
	var hasTenant bool
	_, err := pgx.ForEachRow(rows, []any{&table, &hasTenant}, func() error {
		if hasTenant {
			tenantTables[table] = true
		} else {
			others[table] = notTenantRows[table]
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, notTenantRows, others, "the tables without a tenant column")
	require.Contains(t, tenantTables, "run")

	// Each unique index of a tenant table (its primary key included): its first key
	// column (none for an expression), and whether it is the primary key.
	rows, _ = tx.Query(ctx, `
		SELECT c.relname, ic.relname, coalesce(a.attname, ''), i.indisprimary, pg_get_indexdef(i.indexrelid)
		FROM pg_index i
		JOIN pg_class c ON c.oid = i.indrelid
		JOIN pg_class ic ON ic.oid = i.indexrelid
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE c.relnamespace = 'stepgate'::regnamespace AND i.indisunique
		ORDER BY 1, 2`)
	primary := map[string]string{} // table: its primary key's first column
	lookups := map[string]bool{}
	var index, first, def string
	var isPrimary bool
	_, err = pgx.ForEachRow(rows, []any{&table, &index, &first, &isPrimary, &def}, func() error {
		if !tenantTables[table] {
			return nil
		}
		if isPrimary {
			primary[table] = first
		}
		switch {
		case first == "tenant":
		case idOnlyLookups[index] != "" && !isPrimary:
			lookups[index] = true
		default:
			t.Errorf("%s: unique index %s does not lead with tenant: %s", table, index, def)
		}
		return nil
	})
	require.NoError(t, err)
	for table := range tenantTables {
		require.Equal(t, "tenant", primary[table], "%s: the primary key leads with tenant", table)
	}
	for index := range idOnlyLookups {
		require.True(t, lookups[index], "%s is allowed without the tenant, and exists", index)
	}
}

// TestTenantKeyedRunsUpgrade: a database made by the build before migration 0051, with
// runs (a parent and its child), tombstones, operations, schedules and watches of two
// tenants, reaches keys led by the tenant: every row is kept; run, run_tombstone,
// operation, schedule and run_watch have primary keys led by it, run_child is unique
// within a tenant; the id-only lookups keep ids unique over every tenant; run has as many
// indexes as before; and the foreign keys of a run's rows are on the new primary key,
// refusing a row of another tenant and deleting a run's rows with it.
func TestTenantKeyedRunsUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.UpTo(ctx, pool, 50))

	_, err := pool.Exec(ctx, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
		VALUES ('00000000-0000-0000-0000-00000000000a', 'acme', 'fn', 1, 'suspended', '{}', '{}'),
		       ('00000000-0000-0000-0000-00000000000b', 'globex', 'fn', 1, 'suspended', '{}', '{}');
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, parent_id, parent_seq, parent_name)
		VALUES ('00000000-0000-0000-0000-0000000000a1', 'acme', 'fn', 1, 'queued', '{}', '{}', '00000000-0000-0000-0000-00000000000a', 1, 'child'),
		       ('00000000-0000-0000-0000-0000000000b1', 'globex', 'fn', 1, 'queued', '{}', '{}', '00000000-0000-0000-0000-00000000000b', 1, 'child');
		INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, journal_bytes)
		SELECT r.tenant, r.id, s, 'step', 's' || s, to_jsonb(s), 1, s
		FROM stepgate.run r, generate_series(1, 2) s WHERE r.parent_id IS NULL;
		INSERT INTO stepgate.callback (run_id, seq, tenant, name, token_hash, expires_at)
		SELECT r.id, 3, r.tenant, 'cb', sha256(r.id::text::bytea), now() + interval '1 hour'
		FROM stepgate.run r WHERE r.parent_id IS NULL;
		INSERT INTO stepgate.run_tombstone (id, tenant, function, finished_at)
		VALUES ('00000000-0000-0000-0000-0000000000c1', 'acme', 'fn', now()),
		       ('00000000-0000-0000-0000-0000000000c2', 'globex', 'fn', now());
		INSERT INTO stepgate.operation (id, tenant, kind, filter, by_identity)
		VALUES ('00000000-0000-0000-0000-0000000000d1', 'acme', 'cancel', '{}', '{}'),
		       ('00000000-0000-0000-0000-0000000000d2', 'globex', 'cancel', '{}', '{}');
		INSERT INTO stepgate.schedule (id, tenant, name, function, cron, input, identity, next_at)
		VALUES ('00000000-0000-0000-0000-0000000000e1', 'acme', 'nightly', 'fn', '0 0 * * *', '{}', '{}', now()),
		       ('00000000-0000-0000-0000-0000000000e2', 'globex', 'nightly', 'fn', '0 0 * * *', '{}', '{}', now());
		INSERT INTO stepgate.run_watch (gateway_id, tenant, expires_at)
		VALUES ('g1', 'acme', now()), ('g1', 'globex', now()), ('g2', 'acme', now())`)
	require.NoError(t, err)
	runIndexes := indexCount(t, pool, "run")

	require.NoError(t, migrations.UpTo(ctx, pool, 51))

	for table, want := range map[string]int{
		"run": 4, "journal_entry": 4, "callback": 2, "run_tombstone": 2, "operation": 2, "schedule": 2, "run_watch": 3,
	} {
		var rows, acme int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tenant = 'acme')
			FROM stepgate.`+pgx.Identifier{table}.Sanitize()).Scan(&rows, &acme))
		require.Equal(t, want, rows, "%s: every row is kept", table)
		require.NotZero(t, acme, "%s", table)
		require.Less(t, acme, rows, "%s: and each keeps its tenant", table)
	}
	require.Equal(t, runIndexes, indexCount(t, pool, "run"), "run's new primary key replaces its unique (tenant, id)")

	keys := map[string]string{}
	rows, _ := pool.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid IN ('stepgate.run'::regclass, 'stepgate.run_tombstone'::regclass, 'stepgate.operation'::regclass,
		    'stepgate.schedule'::regclass, 'stepgate.run_watch'::regclass, 'stepgate.callback'::regclass) AND contype IN ('p', 'u')`)
	var name, def string
	_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { keys[name] = def; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"run_pkey":                   "PRIMARY KEY (tenant, id)",
		"run_id_lookup":              "UNIQUE (id)",
		"run_tombstone_pkey":         "PRIMARY KEY (tenant, id)",
		"operation_pkey":             "PRIMARY KEY (tenant, id)",
		"operation_id_lookup":        "UNIQUE (id)",
		"schedule_pkey":              "PRIMARY KEY (tenant, id)",
		"schedule_id_lookup":         "UNIQUE (id)",
		"schedule_tenant_name_key":   "UNIQUE (tenant, name)",
		"run_watch_pkey":             "PRIMARY KEY (tenant, gateway_id)",
		"callback_pkey":              "PRIMARY KEY (tenant, run_id, seq)",
		"callback_token_hash_lookup": "UNIQUE (token_hash)",
	}, keys)
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_indexdef('stepgate.run_child'::regclass)`).Scan(&def))
	require.Equal(t, "CREATE UNIQUE INDEX run_child ON stepgate.run USING btree (tenant, parent_id, parent_seq) WHERE (parent_id IS NOT NULL)", def)

	// The foreign keys to run: as before, now through its primary key.
	fkeys := map[string]string{}
	rows, _ = pool.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) || ' via ' || conindid::regclass::text FROM pg_constraint
		WHERE confrelid = 'stepgate.run'::regclass AND contype = 'f'`)
	_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { fkeys[name] = def; return nil })
	require.NoError(t, err)
	const fk = "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE via stepgate.run_pkey"
	require.Equal(t, map[string]string{
		"journal_entry_run_fkey": fk, "attempt_failure_run_fkey": fk, "callback_run_fkey": fk,
		"message_run_fkey": fk, "stream_run_fkey": fk, "run_wait_run_fkey": fk,
	}, fkeys)

	// An id is still unique over every tenant: no run, operation or schedule of another
	// tenant can take one, so a lookup by id alone finds only the row of that id.
	for _, stmt := range []struct{ sql, index string }{
		{`INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
			VALUES ('00000000-0000-0000-0000-00000000000a', 'globex', 'fn', 1, 'queued', '{}', '{}')`, "run_id_lookup"},
		{`INSERT INTO stepgate.operation (id, tenant, kind, status, filter, by_identity)
			VALUES ('00000000-0000-0000-0000-0000000000d1', 'globex', 'cancel', 'completed', '{}', '{}')`, "operation_id_lookup"},
		{`INSERT INTO stepgate.schedule (id, tenant, name, function, cron, input, identity, next_at)
			VALUES ('00000000-0000-0000-0000-0000000000e1', 'globex', 'hourly', 'fn', '0 * * * *', '{}', '{}', now())`, "schedule_id_lookup"},
	} {
		_, err := pool.Exec(ctx, stmt.sql)
		require.ErrorContains(t, err, stmt.index)
	}
	// A second child at a seq is refused; the seq is the parent's, in its tenant.
	_, err = pool.Exec(ctx, `INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, parent_id, parent_seq, parent_name)
		VALUES ('00000000-0000-0000-0000-0000000000f1', 'acme', 'fn', 1, 'queued', '{}', '{}', '00000000-0000-0000-0000-00000000000a', 1, 'child')`)
	require.ErrorContains(t, err, "run_child")

	// A row of another tenant than its run's is refused; a run's rows go with it.
	_, err = pool.Exec(ctx, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, journal_bytes)
		VALUES ('globex', '00000000-0000-0000-0000-00000000000a', 9, 'step', 's', '1', 1, 1)`)
	require.ErrorContains(t, err, "journal_entry_run_fkey")
	_, err = pool.Exec(ctx, `DELETE FROM stepgate.run WHERE id = '00000000-0000-0000-0000-00000000000a'`)
	require.NoError(t, err)
	for table, want := range map[string]int{"journal_entry": 2, "callback": 1} {
		var left int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM stepgate.`+pgx.Identifier{table}.Sanitize()+
			` WHERE tenant = 'globex'`).Scan(&left))
		require.Equal(t, want, left, "%s: the other run's rows are kept", table)
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM stepgate.`+pgx.Identifier{table}.Sanitize()).Scan(&left))
		require.Equal(t, want, left, "%s: the deleted run's rows are gone", table)
	}
}

// indexCount is the number of indexes of stepgate's table.
func indexCount(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_index WHERE indrelid = ('stepgate.' || $1)::regclass`, table).Scan(&n))
	return n
}
