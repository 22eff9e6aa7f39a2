package failure_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal/failure"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// TestFailureGroups100k measures the dead-letter view's query (FailureGroups, GET
// /v1/failures) over 100,000 failed runs of a tenant in 20 groups, beside 100,000 of
// another tenant and 100,000 completed runs (docs/benchmarks-history.md, "Bulk rerun (redrive)
// and the dead-letter view"): EXPLAIN ANALYZE's execution time, warm. It runs only with
// STEPGATE_BENCH_BULK=1.
func TestFailureGroups100k(t *testing.T) {
	if os.Getenv("STEPGATE_BENCH_BULK") == "" {
		t.Skip("set STEPGATE_BENCH_BULK=1 to measure the failures view over 100,000 failed runs")
	}
	db := pgtest.DB(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, error, created_at, finished_at)
		SELECT gen_random_uuid(), tn, 'fn.' || (i % 10), 1, st, '{}', '{"subject":"seed"}',
			CASE WHEN st = 'failed' THEN jsonb_build_object('type', 'http_status',
				'message', CASE WHEN i % 20 < 10 THEN 'order ' || i || ' not found' ELSE 'fetch "https://x/' || i || '" took ' || (i % 997) || 'ms' END) END,
			now() - make_interval(secs => i * 3), now() - make_interval(secs => i * 3)
		FROM generate_series(1, 100000) i,
			(VALUES ('t1', 'failed'), ('t2', 'failed'), ('t1', 'completed')) AS v (tn, st)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `ANALYZE stepgate.run`)
	require.NoError(t, err)

	since := time.Now().Add(-7 * 24 * time.Hour)
	var plan []string
	for range 3 {
		plan = plan[:0]
		rows, err := db.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+dbsqlc.FailureGroups, "t1", false, false, 101, since)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
	}
	t.Logf("FAILURES QUERY PLAN:\n%s", strings.Join(plan, "\n"))
	began := time.Now()
	groups, more, err := failure.FailureGroups(ctx, db, "t1", failure.Query{Since: since, Limit: 100})
	require.NoError(t, err)
	require.Len(t, groups, 20)
	require.False(t, more)
	var runs int64
	for _, g := range groups {
		runs += g.Runs
	}
	t.Logf("FAILURES: %d groups of %d failed runs in %s (failure.FailureGroups, warm); %s", len(groups), runs,
		time.Since(began).Round(time.Microsecond), plan[len(plan)-1])
}
