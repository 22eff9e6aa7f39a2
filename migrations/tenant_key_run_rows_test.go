package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/migrations"
)

// TestTenantKeyedRunRowsUpgrade: a database made by the build before migration 0050, with
// runs of two tenants that have callbacks, messages, streams with chunks and waits,
// reaches keys led by the tenant: every row is kept (but a wait whose run is gone, which
// could resume nothing), the primary and unique keys lead with the tenant, the foreign
// keys to run are on (tenant, run_id) and delete a run's rows with it, and a row of
// another tenant than its run's is refused.
func TestTenantKeyedRunRowsUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.UpTo(ctx, pool, 49))

	_, err := pool.Exec(ctx, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
		VALUES ('00000000-0000-0000-0000-00000000000a', 'acme', 'fn', 1, 'suspended', '{}', '{}'),
		       ('00000000-0000-0000-0000-00000000000b', 'globex', 'fn', 1, 'suspended', '{}', '{}');
		INSERT INTO stepgate.callback (run_id, seq, tenant, name, token_hash, expires_at)
		SELECT r.id, s, r.tenant, 'cb' || s, sha256((r.id::text || s)::bytea), now() + interval '1 hour'
		FROM stepgate.run r, generate_series(1, 2) s;
		INSERT INTO stepgate.message (tenant, run_id, id, topic, data, identity, consumed_seq)
		SELECT r.tenant, r.id, 'm' || s, 'orders', to_jsonb(s), '{}', CASE WHEN s = 1 THEN 3 END
		FROM stepgate.run r, generate_series(1, 3) s;
		INSERT INTO stepgate.stream (tenant, run_id, key) SELECT r.tenant, r.id, 'log' FROM stepgate.run r;
		INSERT INTO stepgate.stream_chunk (tenant, run_id, key, pos, data, at_seq, at_attempt, at_index)
		SELECT r.tenant, r.id, 'log', s, to_jsonb(s), 1, 1, s FROM stepgate.run r, generate_series(0, 3) s;
		INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, topic, callback_seq, expires_at)
		SELECT r.id, 5, a, r.tenant, 'w', CASE WHEN a = 0 THEN 'receive' ELSE 'await_callback' END,
		    'orders', 2, now() + interval '1 hour'
		FROM stepgate.run r, generate_series(0, 1) a;
		-- A wait whose run is gone.
		INSERT INTO stepgate.run_wait (run_id, seq, tenant, name, kind, topic, expires_at)
		VALUES ('00000000-0000-0000-0000-0000000000ff', 1, 'acme', 'w', 'receive', 'orders', now())`)
	require.NoError(t, err)

	require.NoError(t, migrations.UpTo(ctx, pool, 50)) // 0050's keys; TestTenantKeyedRunsUpgrade checks 0051's

	for table, want := range map[string]int{"callback": 4, "message": 6, "stream": 2, "stream_chunk": 8, "run_wait": 4} {
		var rows, ofTheirRun int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE EXISTS (
				SELECT 1 FROM stepgate.run r WHERE r.tenant = x.tenant AND r.id = x.run_id))
			FROM stepgate.`+pgx.Identifier{table}.Sanitize()+` x`).Scan(&rows, &ofTheirRun))
		require.Equal(t, want, rows, "%s: every row of a run is kept", table)
		require.Equal(t, want, ofTheirRun, "%s: every row has its run's tenant", table)
	}

	keys := map[string]string{}
	rows, _ := pool.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid IN ('stepgate.callback'::regclass, 'stepgate.message'::regclass, 'stepgate.stream'::regclass,
		    'stepgate.stream_chunk'::regclass, 'stepgate.run_wait'::regclass) AND contype IN ('p', 'u', 'f')`)
	var name, def string
	_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { keys[name] = def; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"callback_pkey":           "PRIMARY KEY (tenant, run_id, seq)",
		"callback_token_hash_key": "UNIQUE (token_hash)",
		"callback_run_fkey":       "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
		"message_pkey":            "PRIMARY KEY (tenant, run_id, id)",
		"message_run_fkey":        "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
		"stream_pkey":             "PRIMARY KEY (tenant, run_id, key)",
		"stream_run_fkey":         "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
		"stream_chunk_pkey":       "PRIMARY KEY (tenant, run_id, key, pos)",
		"stream_chunk_place_key":  "UNIQUE (tenant, run_id, key, at_seq, at_attempt, at_index)",
		"stream_chunk_stream_fkey": "FOREIGN KEY (tenant, run_id, key) REFERENCES stepgate.stream(tenant, run_id, key) " +
			"ON DELETE CASCADE",
		"run_wait_pkey":     "PRIMARY KEY (tenant, run_id, seq, alt)",
		"run_wait_run_fkey": "FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE",
	}, keys)

	// A row of another tenant than its run's is refused.
	_, err = pool.Exec(ctx, `INSERT INTO stepgate.run_wait (run_id, seq, tenant, name, kind, topic, expires_at)
		VALUES ('00000000-0000-0000-0000-00000000000a', 9, 'globex', 'w', 'receive', 'orders', now())`)
	require.ErrorContains(t, err, "run_wait_run_fkey")

	// A run's rows go with it, and only its.
	_, err = pool.Exec(ctx, `DELETE FROM stepgate.run WHERE id = '00000000-0000-0000-0000-00000000000a'`)
	require.NoError(t, err)
	for table, want := range map[string]int{"callback": 2, "message": 3, "stream": 1, "stream_chunk": 4, "run_wait": 2} {
		var left, globex int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tenant = 'globex')
			FROM stepgate.`+pgx.Identifier{table}.Sanitize()).Scan(&left, &globex))
		require.Equal(t, want, left, "%s: the deleted run's rows are gone", table)
		require.Equal(t, want, globex, "%s: the other run's rows are kept", table)
	}
}
