package maintenance_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// TestStatistics: the first pass analyzes the run table once it has grown; a later pass
// looks again only once StatisticsEvery has passed on its clock since the last look.
func TestStatistics(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	exec(t, db, `ALTER TABLE stepgate.run SET (autovacuum_enabled = false)`) // no ANALYZE but the service's
	exec(t, db, `ANALYZE stepgate.run`)
	run := newRun(t, db)

	clk := clock.NewTest(time.Now())
	s := maintenance.NewStatistics(db, (&logs{}).logger(), clk)

	grow(t, db, run.ID, 3000)
	s.Pass(t.Context())
	require.GreaterOrEqual(t, tuples(t, db), 3001.0, "the first pass analyzes")

	grow(t, db, run.ID, 3500)
	s.Pass(t.Context())
	clk.Advance(maintenance.StatisticsEvery)
	s.Pass(t.Context())
	require.Less(t, tuples(t, db), 3002.0, "not again within StatisticsEvery")
	clk.Advance(time.Nanosecond)
	s.Pass(t.Context())
	require.GreaterOrEqual(t, tuples(t, db), 6501.0, "once StatisticsEvery has passed")
}

// grow copies run id n times, and waits until the statistics count the new rows as
// grown (journal.AnalyzeGrown's condition).
func grow(t *testing.T, db *pgxpool.Pool, id string, n int) {
	t.Helper()
	conn, err := db.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(t.Context(), `INSERT INTO stepgate.run
		SELECT (jsonb_populate_record(NULL::stepgate.run, to_jsonb(r) || jsonb_build_object('id', gen_random_uuid()))).*
		FROM stepgate.run r, generate_series(1, $2) WHERE r.id = $1`, id, n)
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), `SELECT 1`)
	require.NoError(t, err)
	eventually(t, "the statistics count the new rows", func() bool {
		var grown bool
		require.NoError(t, db.QueryRow(t.Context(), `SELECT s.n_live_tup > 2 * greatest(c.reltuples, 1000)
			FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = 'stepgate.run'::regclass`).Scan(&grown))
		return grown
	})
}

func tuples(t *testing.T, db *pgxpool.Pool) float64 {
	t.Helper()
	var n float64
	require.NoError(t, db.QueryRow(t.Context(), `SELECT reltuples FROM pg_class WHERE oid = 'stepgate.run'::regclass`).Scan(&n))
	return n
}
