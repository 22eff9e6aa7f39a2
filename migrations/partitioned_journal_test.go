package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/migrations"
)

// TestPartitionedJournalUpgrade: a database with runs, entries and failures, made by the
// build before migration 0050, reaches the partitioned journal: every entry and failure
// is kept, in the partition of its run's month (UUIDv7 ids; another id in DEFAULT), and
// the tables keep their keys, foreign keys, index, guard, row security and grants.
func TestPartitionedJournalUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.UpTo(ctx, pool, 49))

	// Runs of October and November 2025 (UUIDv7: 0x019a... ms), and one of another kind.
	const oct, nov, other = "019a1f2b-3c4d-7e5f-8a6b-7c8d9e0f1a2b", "019a6b7c-8d9e-7f0a-9b1c-2d3e4f5a6b7c", "00000000-0000-4000-8000-00000000000c"
	_, err := pool.Exec(ctx, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
		VALUES ($1, 'acme', 'fn', 1, 'queued', '{}', '{}'), ($2, 'globex', 'fn', 1, 'queued', '{}', '{}'),
		       ($3, 'globex', 'fn', 1, 'queued', '{}', '{}')`, oct, nov, other)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, journal_bytes)
		SELECT r.tenant, r.id, s, 'step', 's' || s, to_jsonb(s), 1, s FROM stepgate.run r, generate_series(1, 3) s`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO stepgate.attempt_failure (tenant, run_id, seq, attempt, name, error)
		SELECT r.tenant, r.id, 0, 1, '', '{}' FROM stepgate.run r`)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))

	type placed struct{ Table, Partition, Run string }
	rows, _ := pool.Query(ctx, `
		SELECT DISTINCT 'journal_entry', tableoid::regclass::text, run_id::text FROM stepgate.journal_entry
		UNION ALL SELECT DISTINCT 'attempt_failure', tableoid::regclass::text, run_id::text FROM stepgate.attempt_failure
		ORDER BY 1, 2`)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[placed])
	require.NoError(t, err)
	require.ElementsMatch(t, []placed{
		{"attempt_failure", "stepgate.attempt_failure_default", other},
		{"attempt_failure", "stepgate.attempt_failure_p202510", oct},
		{"attempt_failure", "stepgate.attempt_failure_p202511", nov},
		{"journal_entry", "stepgate.journal_entry_default", other},
		{"journal_entry", "stepgate.journal_entry_p202510", oct},
		{"journal_entry", "stepgate.journal_entry_p202511", nov},
	}, got, "each row in its run's month")
	var entries, failures int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM stepgate.journal_entry), (SELECT count(*) FROM stepgate.attempt_failure)`).Scan(&entries, &failures))
	require.Equal(t, 9, entries, "every entry is kept")
	require.Equal(t, 3, failures, "every failure is kept")

	var partitioned []string
	rows, _ = pool.Query(ctx, `SELECT c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
		WHERE c.relnamespace = 'stepgate'::regnamespace ORDER BY 1`)
	partitioned, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"attempt_failure", "journal_entry"}, partitioned)

	keys := map[string]string{}
	rows, _ = pool.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid IN ('stepgate.journal_entry'::regclass, 'stepgate.attempt_failure'::regclass) AND contype IN ('p', 'f', 'c')`)
	var name, def string
	_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { keys[name] = def; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"journal_entry_pkey":        "PRIMARY KEY (tenant, run_id, seq)",
		"attempt_failure_pkey":      "PRIMARY KEY (tenant, run_id, seq, attempt)",
		"journal_entry_run_fkey":    "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
		"attempt_failure_run_fkey":  "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
		"journal_entry_seq_check":   "CHECK ((seq > 0))",
		"attempt_failure_seq_check": "CHECK ((seq >= 0))",
	}, keys)

	var fenced bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT bool_and(c.relrowsecurity AND c.relforcerowsecurity
			AND (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) = 2
			AND has_table_privilege('stepgate_app', c.oid, 'SELECT,INSERT') AND has_table_privilege('stepgate_system', c.oid, 'SELECT,INSERT'))
		FROM pg_class c WHERE c.oid IN ('stepgate.journal_entry'::regclass, 'stepgate.attempt_failure'::regclass)`).Scan(&fenced))
	require.True(t, fenced, "row security, both policies and the grants are back")

	// The guard is on, the running total may still change, and a run's delete takes its
	// rows from every partition.
	_, err = pool.Exec(ctx, `UPDATE stepgate.journal_entry SET name = 'changed' WHERE seq = 1`)
	require.ErrorContains(t, err, "immutable", "the guard is on again")
	_, err = pool.Exec(ctx, `UPDATE stepgate.journal_entry SET journal_bytes = journal_bytes + 1 WHERE seq = 1`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM stepgate.run`)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM stepgate.journal_entry), (SELECT count(*) FROM stepgate.attempt_failure)`).Scan(&entries, &failures))
	require.Zero(t, entries+failures, "the cascade reaches every partition")
}
