package migrations_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestUp(t *testing.T) {
	t.Parallel()

	t.Run("SecondRunIsNoop", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t, pgtest.EmptyDBURL(t), 4)
		require.NoError(t, migrations.Up(t.Context(), pool))
		first := applied(t, pool)
		require.Contains(t, first.files, "0001_create_core.sql")
		require.NotEmpty(t, first.river)

		require.NoError(t, migrations.Up(t.Context(), pool))
		require.Equal(t, first, applied(t, pool))
	})

	t.Run("ConcurrentRunsSucceed", func(t *testing.T) {
		t.Parallel()
		url := pgtest.EmptyDBURL(t)
		a, b := newPool(t, url, 2), newPool(t, url, 2)

		start := make(chan struct{})
		errs := make(chan error, 2)
		for _, pool := range []*pgxpool.Pool{a, b} {
			go func() {
				<-start
				errs <- migrations.Up(t.Context(), pool)
			}()
		}
		close(start)
		for range 2 {
			select {
			case err := <-errs:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Fatal("Up did not return")
			}
		}
		require.Contains(t, applied(t, a).files, "0001_create_core.sql")
	})

	t.Run("NeedsTwoConnections", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t, pgtest.EmptyDBURL(t), 1)

		require.ErrorContains(t, migrations.Up(t.Context(), pool), "2 connections")
	})
}

func TestHash(t *testing.T) {
	t.Parallel()
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{12}$`), migrations.Hash())
	require.Equal(t, migrations.Hash(), migrations.Hash())
}

func newPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// migrationState is what Up recorded.
type migrationState struct {
	files map[string]time.Time // file name: applied at
	river []int                // versions
}

func applied(t *testing.T, pool *pgxpool.Pool) migrationState {
	t.Helper()
	ctx := t.Context()
	s := migrationState{files: map[string]time.Time{}}
	rows, _ := pool.Query(ctx, `SELECT name, applied_at FROM stepgate.schema_migration`)
	var (
		name string
		at   time.Time
	)
	_, err := pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		s.files[name] = at
		return nil
	})
	require.NoError(t, err)
	rows, _ = pool.Query(ctx, `SELECT version FROM river_migration ORDER BY version`)
	s.river, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return s
}

// TestLifetimeCountsBackfill: migration 0040 fills a run's lifetime counts from what its
// rows tell, finished runs included (whose guard refuses updates, and is on again
// after), and leaves the rest at 0.
func TestLifetimeCountsBackfill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.Up(ctx, pool))
	// Back to the schema before 0040, with runs of that time.
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`DELETE FROM stepgate.schema_migration WHERE version = 40`)
	exec(`ALTER TABLE stepgate.run DROP COLUMN lifetime_failed_invocations, DROP COLUMN lifetime_recoveries`)
	const (
		exhausted = "00000000-0000-0000-0000-000000000001" // two retried failures, then the last
		recovered = "00000000-0000-0000-0000-000000000002" // cancelled while queued after two recoveries
		running   = "00000000-0000-0000-0000-000000000003" // recovered once since its journal grew
		declined  = "00000000-0000-0000-0000-000000000004" // failed by its function, a step retried
		badAnswer = "00000000-0000-0000-0000-000000000005"
	)
	exec(`INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, error, finished_at, recoveries, lease_until) VALUES
		($1, 't', 'f', 1, 'failed', '{}', '{}', '{"type":"http_status","message":"HTTP 500 (attempt 3 of 3; giving up)"}', now(), 0, NULL),
		($2, 't', 'f', 1, 'cancelled', '{}', '{}', NULL, now(), 2, NULL),
		($3, 't', 'f', 1, 'running', '{}', '{}', NULL, NULL, 1, now() + interval '1 hour'),
		($4, 't', 'f', 1, 'failed', '{}', '{}', '{"type":"card_declined","message":"no"}', now(), 0, NULL),
		($5, 't', 'f', 1, 'failed', '{}', '{}', '{"type":"bad_answer","message":"status maybe"}', now(), 0, NULL)`,
		exhausted, recovered, running, declined, badAnswer)
	exec(`INSERT INTO stepgate.attempt_failure (run_id, seq, attempt, error) VALUES
		($1, 0, 1, '{}'), ($1, 0, 2, '{}'), ($2, 2, 1, '{}')`, exhausted, declined)

	require.NoError(t, migrations.Up(ctx, pool))
	rows, _ := pool.Query(ctx, `SELECT id::text, lifetime_failed_invocations, lifetime_recoveries FROM stepgate.run`)
	got := map[string][2]int{}
	var (
		id               string
		failed, recovers int
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &failed, &recovers}, func() error {
		got[id] = [2]int{failed, recovers}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, map[string][2]int{
		exhausted: {3, 0},
		recovered: {0, 2},
		running:   {0, 1},
		declined:  {0, 0}, // a step's failed attempt and a failed answer: no failed invocation
		badAnswer: {1, 0},
	}, got)
	_, err = pool.Exec(ctx, `UPDATE stepgate.run SET lifetime_recoveries = 9 WHERE id = $1`, exhausted)
	require.ErrorContains(t, err, "terminal runs are immutable", "the guard is on again")
}

// TestChecksums: Up records each file's SHA-256 and refuses to start, naming the file,
// when a migration the database applied has another text in this build; a database
// migrated before checksums were kept gets them on its next Up.
func TestChecksums(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.Up(ctx, pool))

	var missing int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM stepgate.schema_migration WHERE checksum !~ '^[0-9a-f]{64}$' OR checksum IS NULL`).Scan(&missing))
	require.Zero(t, missing, "every applied migration has its checksum")

	t.Run("FilledWhenMissing", func(t *testing.T) {
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = NULL WHERE version = 1`)
		require.NoError(t, err)
		require.NoError(t, migrations.Up(ctx, pool))
		var sum string
		require.NoError(t, pool.QueryRow(ctx, `SELECT checksum FROM stepgate.schema_migration WHERE version = 1`).Scan(&sum))
		require.Regexp(t, `^[0-9a-f]{64}$`, sum)
	})

	t.Run("EditedIsRefused", func(t *testing.T) {
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = repeat('0', 64) WHERE version = 1`)
		require.NoError(t, err)
		err = migrations.Up(ctx, pool)
		var changed *migrations.ChangedError
		require.ErrorAs(t, err, &changed)
		require.Equal(t, "0001_create_core.sql", changed.Name)
		require.ErrorContains(t, err, "0001_create_core.sql changed after this database applied it")
	})

	t.Run("RenamedIsRefused", func(t *testing.T) {
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = NULL, name = '0001_other.sql' WHERE version = 1`)
		require.NoError(t, err)
		require.ErrorContains(t, migrations.Up(ctx, pool), "applied 0001_other.sql as version 1, this build has 0001_create_core.sql")
	})
}

// TestEveryFileIsEmbedded: the embed pattern takes NNNN_name.sql only (schema.sql, the
// generated dump, sits beside them); a misnamed migration would be left out silently, so
// every other .sql file here is an error.
func TestEveryFileIsEmbedded(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.sql")
	require.NoError(t, err)
	named := regexp.MustCompile(`^[0-9]{4}_[a-z0-9_]+\.sql$`)
	for _, f := range files {
		if f != "schema.sql" {
			require.Regexp(t, named, f, "a migration is named NNNN_name.sql, or it is not applied")
		}
	}
	require.Contains(t, files, "schema.sql")
}

// TestCallbackTokensSealed: migration 0043 seals the callback tokens journaled before it
// (journal.CallbackKey): the token is no longer in the journal's rows, the gateway's key
// opens each entry to exactly what its function had, and the journal is immutable again.
func TestCallbackTokensSealed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t, pgtest.EmptyDBURL(t), 4)
	require.NoError(t, migrations.Up(ctx, pool))
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// Back to the schema before 0043, with callbacks of that time.
	exec(`DELETE FROM stepgate.schema_migration WHERE version = 43`)
	exec(`DROP TABLE stepgate.callback_key`)
	const run = "00000000-0000-0000-0000-000000000001"
	tokens := []string{"Rk9PYmFyYmF6X3F1eC1xdXV4LWNvcmdlLWdyYXVsdDE", "short", strings.Repeat("t", 70)}
	exec(`INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity) VALUES ($1, 't', 'f', 1, 'suspended', '{}', '{}')`, run)
	var before []string
	for i, tok := range tokens {
		out := `{"url": "https://gw.example/v1/callbacks/` + tok + `", "token": "` + tok + `", "expires_at": "2027-01-02T03:04:05.123456Z"}`
		exec(`INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation) VALUES ($1, $2, 'callback', 'cb', $3, 1)`, run, i+1, out)
		before = append(before, out)
	}
	exec(`INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation) VALUES ($1, 4, 'step', 'keep', '{"token": "mine"}', 1)`, run)

	require.NoError(t, migrations.Up(ctx, pool))
	var rows string
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(e::text, ' ') FROM stepgate.journal_entry e`).Scan(&rows))
	for _, tok := range tokens {
		require.NotContains(t, rows, tok, "the token is sealed")
	}
	require.Contains(t, rows, `"mine"`, "a step's output is the function's own")
	key, err := journal.LoadCallbackKey(ctx, pool)
	require.NoError(t, err)
	for i := range tokens {
		var stored json.RawMessage
		require.NoError(t, pool.QueryRow(ctx, `SELECT output FROM stepgate.journal_entry WHERE run_id = $1 AND seq = $2`, run, i+1).Scan(&stored))
		require.Contains(t, string(stored), `"https://gw.example/v1/callbacks/xxxxx"`)
		opened, err := key.OpenCallback(stored)
		require.NoError(t, err)
		require.JSONEq(t, before[i], string(opened), "entry %d opens to what its function had", i+1)
	}
	_, err = pool.Exec(ctx, `UPDATE stepgate.journal_entry SET name = 'x' WHERE run_id = $1`, run)
	require.ErrorContains(t, err, "immutable", "the guard is on again")
}

// TestEveryTriggerIsDocumented: docs/internals.md lists every trigger the migrations make
// (schema.sql shows them all), so that no work the database does goes unseen.
func TestEveryTriggerIsDocumented(t *testing.T) {
	t.Parallel()
	schema, err := os.ReadFile("schema.sql")
	require.NoError(t, err)
	doc, err := os.ReadFile("../docs/internals.md")
	require.NoError(t, err)
	triggers := regexp.MustCompile(`(?m)^CREATE TRIGGER (\w+) `).FindAllStringSubmatch(string(schema), -1)
	require.NotEmpty(t, triggers)
	for _, m := range triggers {
		require.Contains(t, string(doc), "`"+m[1]+"`", "docs/internals.md lists trigger %s", m[1])
	}
}

// TestNoTriggerOnRiversTables: River's tables are River's, as River writes them. What a
// stepgate.invoke job carries (its run's tenant and priority) is set where the invoker
// inserts it, and no trigger changes it (migration 0046 dropped invoke_job_of_run).
func TestNoTriggerOnRiversTables(t *testing.T) {
	t.Parallel()
	rows, _ := pgtest.Tx(t).Query(t.Context(), `
		SELECT c.relname || '.' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE NOT t.tgisinternal AND c.relname LIKE 'river\_%' ORDER BY 1`)
	triggers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, triggers)
	var fn *string
	require.NoError(t, pgtest.Tx(t).QueryRow(t.Context(), `SELECT to_regproc('stepgate.invoke_job_of_run')::text`).Scan(&fn))
	require.Nil(t, fn, "its function is gone too")
}
