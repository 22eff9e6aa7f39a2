package gatewayproc

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestAnswerBound: a statement of a bounded pool that the database does not answer
// within the bound fails as the database being out of reach (the API's 503), its
// connection closed, instead of waiting for it; the next statement gets a connection
// that works; a statement within the bound, a query's rows read after it, and the
// pool's own tracer are unaffected.
func TestAnswerBound(t *testing.T) {
	t.Parallel()
	pc, err := pgxpool.ParseConfig(pgtest.DBURL(t))
	require.NoError(t, err)
	rt := &pgtest.RoundTrips{}
	pc.ConnConfig.Tracer = rt
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), bounded(pc, time.Second, DefaultConnectTimeout))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	t.Logf("setup done")
	// pg_sleep answers nothing for 30s, as a database that hangs.
	start := time.Now()
	_, err = pool.Exec(t.Context(), `SELECT pg_sleep(30)`)
	require.Error(t, err)
	require.Less(t, time.Since(start), 20*time.Second, "the statement waited for its answer: %v", err)
	require.True(t, journal.IsUnavailable(err), "not the database out of reach: %v", err)
	require.Contains(t, err.Error(), "timeout")
	start = time.Now()
	err = pool.QueryRow(t.Context(), `SELECT pg_sleep(30)`).Scan(new(string))
	require.True(t, journal.IsUnavailable(err), "QueryRow: %v", err)
	require.Less(t, time.Since(start), 20*time.Second)

	// A statement in time, and a query whose rows are read well after it started: the
	// bound is cleared when the statement ends.
	rows, err := pool.Query(t.Context(), `SELECT g FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 3, n)
	var one int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT 1 FROM pg_sleep(0.2)`).Scan(&one))
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT 1`).Scan(&one))
	require.Positive(t, rt.Count(), "the pool's own tracer was not called")
}
