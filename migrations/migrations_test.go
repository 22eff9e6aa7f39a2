package migrations_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/pgtest"
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
