package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/migrations"
)

// TestTenantKeyedJournalUpgrade: a database with runs, entries and failures, made by the
// build before migration 0049, reaches the tenant-keyed journal: every entry and every
// failure gets its run's tenant, none is lost, the keys lead with the tenant, and the
// guard that keeps entries immutable is on again (it was off for the backfill).
func TestTenantKeyedJournalUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.UpTo(ctx, pool, 48))

	// Three runs of two tenants; the last has no entry and no failure.
	_, err := pool.Exec(ctx, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
		VALUES ('00000000-0000-0000-0000-00000000000a', 'acme', 'fn', 1, 'queued', '{}', '{}'),
		       ('00000000-0000-0000-0000-00000000000b', 'globex', 'fn', 1, 'queued', '{}', '{}'),
		       ('00000000-0000-0000-0000-00000000000c', 'globex', 'fn', 1, 'queued', '{}', '{}');
		INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, journal_bytes)
		SELECT r.id, s, 'step', 's' || s, to_jsonb(s), 1, s
		FROM (VALUES ('00000000-0000-0000-0000-00000000000a'::uuid), ('00000000-0000-0000-0000-00000000000b')) r(id),
		    generate_series(1, 3) s;
		INSERT INTO stepgate.attempt_failure (run_id, seq, attempt, name, error)
		VALUES ('00000000-0000-0000-0000-00000000000a', 0, 1, '', '{}'),
		       ('00000000-0000-0000-0000-00000000000a', 2, 1, 's2', '{}'),
		       ('00000000-0000-0000-0000-00000000000b', 0, 1, '', '{}')`)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))

	for table, want := range map[string]int{"journal_entry": 6, "attempt_failure": 3} {
		var rows, ofTheirRun int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE x.tenant = r.tenant)
			FROM stepgate.`+pgx.Identifier{table}.Sanitize()+` x JOIN stepgate.run r ON r.id = x.run_id`).Scan(&rows, &ofTheirRun))
		require.Equal(t, want, rows, "%s: every row is kept", table)
		require.Equal(t, want, ofTheirRun, "%s: every row has its run's tenant", table)
	}
	rows, _ := pool.Query(ctx, `SELECT DISTINCT tenant FROM stepgate.journal_entry ORDER BY 1`)
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"acme", "globex"}, tenants)

	keys := map[string]string{}
	rows, _ = pool.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid IN ('stepgate.journal_entry'::regclass, 'stepgate.attempt_failure'::regclass) AND contype IN ('p', 'f')`)
	var name, def string
	_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { keys[name] = def; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"journal_entry_pkey":       "PRIMARY KEY (tenant, run_id, seq)",
		"attempt_failure_pkey":     "PRIMARY KEY (tenant, run_id, seq, attempt)",
		"journal_entry_run_fkey":   "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
		"attempt_failure_run_fkey": "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
	}, keys)

	_, err = pool.Exec(ctx, `UPDATE stepgate.journal_entry SET name = 'changed' WHERE seq = 1`)
	require.ErrorContains(t, err, "immutable", "the guard is on again")
}
