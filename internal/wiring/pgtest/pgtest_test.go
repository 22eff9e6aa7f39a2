package pgtest_test

import (
	"context"
	"crypto/rand"
	"errors"
	mathrand "math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTx(t *testing.T) {
	t.Parallel()

	t.Run("WritesAreInvisibleToOthers", func(t *testing.T) {
		t.Parallel()
		ctx, a, b := t.Context(), pgtest.Tx(t), pgtest.Tx(t)
		name := insertMarker(t, a)

		require.Equal(t, 1, countMarkers(t, a, name))
		require.Equal(t, 0, countMarkers(t, b, name))
		require.ErrorIs(t, a.Commit(ctx), pgtest.ErrCommit)
	})

	t.Run("RollsBackWhenTestEnds", func(t *testing.T) {
		t.Parallel()
		var name string
		t.Run("Writes", func(t *testing.T) { name = insertMarker(t, pgtest.Tx(t)) })

		require.Equal(t, 0, countMarkers(t, pgtest.Tx(t), name))
	})

	t.Run("NestedTransactionsCommit", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		var name string
		require.NoError(t, pgx.BeginFunc(t.Context(), tx, func(nested pgx.Tx) error {
			name = insertMarker(t, nested)
			return nil
		}))

		require.Equal(t, 1, countMarkers(t, tx, name))
	})
}

func TestDB(t *testing.T) {
	t.Parallel()

	t.Run("IsMigrated", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)

		var stepgate, river int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM stepgate.schema_migration`).Scan(&stepgate))
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_migration`).Scan(&river))
		require.Positive(t, stepgate)
		require.Positive(t, river)
		require.EqualValues(t, 4, db.Config().MaxConns)
	})

	t.Run("DatabasesAreIsolated", func(t *testing.T) {
		t.Parallel()
		ctx, a, b := t.Context(), pgtest.DB(t), pgtest.DB(t)
		name := insertMarker(t, a)

		require.Equal(t, 1, countMarkers(t, a, name))
		require.Equal(t, 0, countMarkers(t, b, name))
		_, err := a.Exec(ctx, `CREATE TABLE only_in_a (v int)`)
		require.NoError(t, err)
		_, err = b.Exec(ctx, `SELECT FROM only_in_a`)
		requireCode(t, err, "42P01") // undefined_table
	})

	t.Run("DroppedWhenTestPasses", func(t *testing.T) {
		t.Parallel()
		var url string
		t.Run("Uses", func(t *testing.T) {
			url = pgtest.DBURL(t)
			conn, err := pgx.Connect(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close(context.Background()) }) // DROP ... WITH (FORCE) runs first
		})

		_, err := pgx.Connect(t.Context(), url)
		requireCode(t, err, "3D000") // invalid_catalog_name
	})

	t.Run("EmptyHasNoSchema", func(t *testing.T) {
		t.Parallel()
		conn, err := pgx.Connect(t.Context(), pgtest.EmptyDBURL(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })

		var schemas int
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = 'stepgate'`).Scan(&schemas))
		require.Zero(t, schemas)
	})
}

// A DB is what both a pool and a transaction offer.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// insertMarker writes a row with a new name to a table of the migrated schema and
// returns the name.
func insertMarker(t *testing.T, db DB) string {
	t.Helper()
	name := rand.Text()
	// A random version: concurrent transactions inserting the same key would wait on
	// each other.
	_, err := db.Exec(t.Context(), `INSERT INTO stepgate.schema_migration (version, name) VALUES ($1, $2)`,
		1_000_000+mathrand.IntN(1<<30), name)
	require.NoError(t, err)
	return name
}

func countMarkers(t *testing.T, db DB, name string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.schema_migration WHERE name = $1`, name).Scan(&n))
	return n
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v", code, err)
	require.Equal(t, code, pgErr.Code)
}
