package migrations_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
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
		require.Contains(t, first.files, "0000_baseline.sql")
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
		require.Contains(t, applied(t, a).files, "0000_baseline.sql")
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
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = NULL WHERE version = 0`)
		require.NoError(t, err)
		require.NoError(t, migrations.Up(ctx, pool))
		var sum string
		require.NoError(t, pool.QueryRow(ctx, `SELECT checksum FROM stepgate.schema_migration WHERE version = 0`).Scan(&sum))
		require.Regexp(t, `^[0-9a-f]{64}$`, sum)
	})

	t.Run("EditedIsRefused", func(t *testing.T) {
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = repeat('0', 64) WHERE version = 0`)
		require.NoError(t, err)
		err = migrations.Up(ctx, pool)
		var changed *migrations.ChangedError
		require.ErrorAs(t, err, &changed)
		require.Equal(t, "0000_baseline.sql", changed.Name)
		require.ErrorContains(t, err, "0000_baseline.sql changed after this database applied it")
	})

	t.Run("RenamedIsRefused", func(t *testing.T) {
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = NULL, name = '0000_other.sql' WHERE version = 0`)
		require.NoError(t, err)
		require.ErrorContains(t, migrations.Up(ctx, pool), "applied 0000_other.sql as version 0, this build has 0000_baseline.sql")
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

	// And the Go functions a working trigger follows name it in their doc comments, in
	// the journal and the packages beside it.
	files, err := filepath.Glob("../journal/*.go")
	require.NoError(t, err)
	beside, err := filepath.Glob("../journal/*/*.go")
	require.NoError(t, err)
	files = append(files, beside...)
	var named strings.Builder
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range regexp.MustCompile(`(?m)^// Triggers that follow it.*$`).FindAllString(string(text), -1) {
			named.WriteString(line + "\n")
		}
	}
	guards := []string{"journal_entry_is_immutable", "run_terminal_is_final"}
	for _, m := range triggers {
		if !slices.Contains(guards, m[1]) {
			require.Contains(t, named.String(), m[1], "a \"Triggers that follow it\" doc comment in journal/ or a package beside it names %s", m[1])
		}
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
