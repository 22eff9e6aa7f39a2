package migrations_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/migrations"
	"github.com/stepgate/stepgate/migrations/internal/pgdump"
)

// TestHistoryIsKept: the migrations the baseline replaces are kept as test data, and
// their names and checksums in the build are those files'.
func TestHistoryIsKept(t *testing.T) {
	t.Parallel()
	names, sums := migrations.History()
	files, err := filepath.Glob("testdata/history/*.sql")
	require.NoError(t, err)
	require.Len(t, files, len(names))
	for i, f := range files {
		require.Equal(t, names[i], filepath.Base(f))
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		sum := sha256.Sum256(text)
		require.Equal(t, sums[i], hex.EncodeToString(sum[:]), "the checksum of %s", f)
	}
	require.Equal(t, "0045_invocation_owner.sql", names[len(names)-1])
}

// migrateHistory migrates pool's empty database as the last build before the baseline
// did: River's migrations, then each file of testdata/history up to and including last
// in its own transaction with its row (name and checksum) in stepgate.schema_migration.
func migrateHistory(t *testing.T, pool *pgxpool.Pool, last string) {
	t.Helper()
	ctx := t.Context()
	river, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = river.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		CREATE SCHEMA IF NOT EXISTS stepgate;
		CREATE TABLE IF NOT EXISTS stepgate.schema_migration (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(),
			checksum   text
		)`)
	require.NoError(t, err)
	names, _ := migrations.History()
	for _, name := range names {
		text, err := os.ReadFile(filepath.Join("testdata/history", name))
		require.NoError(t, err)
		var version int
		_, err = fmt.Sscanf(name, "%04d_", &version)
		require.NoError(t, err)
		sum := sha256.Sum256(text)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(text)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO stepgate.schema_migration (version, name, checksum) VALUES ($1, $2, $3)`,
				version, name, hex.EncodeToString(sum[:]))
			return err
		})
		require.NoError(t, err, name)
		if name == last {
			return
		}
	}
}

func dumpSchema(t *testing.T, url string) string {
	t.Helper()
	pgDump, err := exec.LookPath("pg_dump")
	require.NoError(t, err)
	text, err := pgdump.Schema(t.Context(), pgDump, url)
	require.NoError(t, err)
	return string(text)
}

func recorded(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, _ := pool.Query(t.Context(), `SELECT format('%s %s %s', version, name, checksum) FROM stepgate.schema_migration ORDER BY version`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// rowCounts returns the rows of each stepgate table but schema_migration: what the
// migrations wrote besides the schema, on an empty database.
func rowCounts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, _ := pool.Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'stepgate' AND tablename <> 'schema_migration'`)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	counts := make(map[string]int, len(tables))
	for _, tb := range tables {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.`+pgx.Identifier{tb}.Sanitize()).Scan(&n))
		counts[tb] = n
	}
	return counts
}

func hasFunction(t *testing.T, pool *pgxpool.Pool, signature string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT to_regprocedure($1) IS NOT NULL`, signature).Scan(&ok))
	return ok
}

// TestHistoryUpgrade: a database that the migrations before the baseline made reaches,
// by Up, exactly the schema of a new database (their pg_dump outputs are equal), with
// the baseline recorded in place of the files it replaces and the dead functions gone;
// Up again changes nothing, and the checksum rule holds for the baseline after.
func TestHistoryUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	freshURL, oldURL := pgtest.EmptyDBURL(t), pgtest.EmptyDBURL(t)
	fresh, old := newPool(t, freshURL, 4), newPool(t, oldURL, 4)
	require.NoError(t, migrations.Up(ctx, fresh))

	migrateHistory(t, old, "0045_invocation_owner.sql")
	const deadTakeSlots = "stepgate.take_slots(text, text, text[], integer[], timestamptz, uuid)"
	require.True(t, hasFunction(t, old, deadTakeSlots), "the history made the dead overload")
	require.True(t, hasFunction(t, old, "stepgate.stripe_cap(integer, integer)"))
	require.True(t, hasFunction(t, old, "stepgate.slot_stripes(integer)"))

	require.NoError(t, migrations.Up(ctx, old))
	require.Equal(t, dumpSchema(t, freshURL), dumpSchema(t, oldURL), "an upgraded database has a new one's schema")
	require.Equal(t, rowCounts(t, old), rowCounts(t, fresh), "and the rows the migrations made (a key, say)")
	require.False(t, hasFunction(t, old, deadTakeSlots))
	require.False(t, hasFunction(t, old, "stepgate.stripe_cap(integer, integer)"))
	require.False(t, hasFunction(t, old, "stepgate.slot_stripes(integer)"))
	require.True(t, hasFunction(t, old, "stepgate.take_slots(text, text, text[], integer[], timestamptz, uuid, boolean)"))
	rows := recorded(t, old)
	require.Equal(t, recorded(t, fresh), rows, "the same migrations, with the same checksums")
	require.Regexp(t, `^0 0000_baseline\.sql [0-9a-f]{64}$`, rows[0])
	pending, err := migrations.Pending(ctx, old)
	require.NoError(t, err)
	require.Empty(t, pending)

	require.NoError(t, migrations.Up(ctx, old), "a second Up")
	require.Equal(t, rows, recorded(t, old), "changes nothing")

	_, err = old.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = repeat('0', 64) WHERE version = 0`)
	require.NoError(t, err)
	var changed *migrations.ChangedError
	require.ErrorAs(t, migrations.Up(ctx, old), &changed)
	require.Equal(t, "0000_baseline.sql", changed.Name)
}

// TestHistoryRefused: Up refuses, naming what is missing and changing nothing, a
// database that applied only some of the migrations the baseline replaces, and one
// whose record of one of them has another text.
func TestHistoryRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("Partial", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t, pgtest.EmptyDBURL(t), 4)
		migrateHistory(t, pool, "0042_may_resume.sql")
		before := recorded(t, pool)
		err := migrations.Up(ctx, pool)
		require.ErrorContains(t, err, "this database applied only 39 of the 42 migrations that 0000_baseline.sql replaces; "+
			"it lacks 0043_callback_tokens_sealed.sql, 0044_tenant_usage.sql, 0045_invocation_owner.sql")
		require.ErrorContains(t, err, "migrate it with that build first (stepgate migrate; in git, the parent of the commit that added migrations/0000_baseline.sql)")
		require.Equal(t, before, recorded(t, pool), "nothing recorded")
		require.False(t, hasFunction(t, pool, "stepgate.usage_add(text, bigint, bigint, bigint)"), "nothing applied")
	})

	t.Run("Edited", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t, pgtest.EmptyDBURL(t), 4)
		migrateHistory(t, pool, "0045_invocation_owner.sql")
		_, err := pool.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = repeat('0', 64) WHERE version = 29`)
		require.NoError(t, err)
		var changed *migrations.ChangedError
		require.ErrorAs(t, migrations.Up(ctx, pool), &changed)
		require.Equal(t, "0029_concurrency_limits.sql", changed.Name)
	})

	t.Run("NotOnHistory", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t, pgtest.EmptyDBURL(t), 4)
		migrateHistory(t, pool, "0045_invocation_owner.sql")
		_, err := pool.Exec(ctx, `INSERT INTO stepgate.schema_migration (version, name) VALUES (33, '0033_other.sql')`)
		require.NoError(t, err)
		require.ErrorContains(t, migrations.Up(ctx, pool), "applied 0033_other.sql as version 33, which is not on stepgate's history")
	})
}
