package maintenance_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// TestSeries: the series service seals the last day's quarter hours that have ended, at
// most SeriesPass of them a pass, for every tenant with a function (an all-functions row
// each, runs or not) and each function with runs; never the quarter under way, never one
// twice; and it deletes the quarters no window reads.
func TestSeries(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	for _, tenant := range []string{"t1", "t2"} {
		_, err := journal.RegisterFunction(t.Context(), db, tenant, "work", "http://127.0.0.1:1/work", json.RawMessage(`{}`), time.Minute, 0)
		require.NoError(t, err)
	}
	var quarter time.Time // two hours before the quarter under way
	require.NoError(t, db.QueryRow(t.Context(),
		`SELECT date_bin('15 minutes', now(), timestamptz '1970-01-01 00:00:00+00') - interval '2 hours'`).Scan(&quarter))
	exec(t, db, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, created_at, started_at, finished_at)
		SELECT gen_random_uuid(), 't1', 'work', 1, 'completed', '{}', '{}', $1::timestamptz + i * interval '1 s',
			$1::timestamptz + i * interval '1 s' + interval '100 ms', $1::timestamptz + i * interval '1 s' + interval '1100 ms'
		FROM generate_series(1, 3) i`, quarter)
	exec(t, db, `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, created_at)
		VALUES (gen_random_uuid(), 't1', 'work', 1, 'queued', '{}', '{}', now())`)
	exec(t, db, `INSERT INTO stepgate.run_series (tenant, function, at, started, claimed, completed, failed, cancelled, unclaimed, duration_ms, wait_ms)
		VALUES ('t3', 'gone', now() - interval '26 hours', 1, 0, 0, 0, 0, 0, '{}', '{}')`)

	w := maintenance.NewSeries(db, (&logs{}).logger())
	require.NoError(t, w.Work(t.Context(), nil))
	require.Equal(t, maintenance.SeriesPass, count(t, db, `SELECT count(*) FROM stepgate.run_series WHERE tenant = 't1' AND function = ''`),
		"one pass seals SeriesPass quarters")
	require.Zero(t, count(t, db, `SELECT count(*) FROM stepgate.run_series WHERE tenant = 't3'`), "older than a day and an hour")

	for range 96/maintenance.SeriesPass + 1 {
		require.NoError(t, w.Work(t.Context(), nil))
	}
	sealed := count(t, db, `SELECT count(*) FROM stepgate.run_series WHERE tenant = 't1' AND function = ''`)
	require.GreaterOrEqual(t, sealed, 96, "the last day's quarters, all sealed")
	require.Equal(t, sealed, count(t, db, `SELECT count(*) FROM stepgate.run_series WHERE tenant = 't2' AND function = ''`),
		"a tenant without runs has its quarters sealed too")
	require.Equal(t, sealed-1, count(t, db, `SELECT extract(epoch FROM max(at) - min(at))::int / 900 FROM stepgate.run_series
		WHERE tenant = 't1' AND function = ''`), "no gaps")
	require.Zero(t, count(t, db, `SELECT count(*) FROM stepgate.run_series
		WHERE at >= date_bin('15 minutes', now() - interval '2 minutes', timestamptz '1970-01-01 00:00:00+00')`), "not the quarter under way")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM stepgate.run_series WHERE function = 'work'`), "a function's quarters with runs only")
	var started, completed int
	var duration, wait []float64
	require.NoError(t, db.QueryRow(t.Context(), `SELECT started, completed, duration_ms, wait_ms FROM stepgate.run_series
		WHERE tenant = 't1' AND function = 'work' AND at = $1`, quarter).Scan(&started, &completed, &duration, &wait))
	require.Equal(t, []int{3, 3}, []int{started, completed})
	require.InDeltaSlice(t, []float64{1000, 1000}, duration, 0.01)
	require.InDeltaSlice(t, []float64{100, 100}, wait, 0.01)
	require.NoError(t, db.QueryRow(t.Context(), `SELECT started FROM stepgate.run_series
		WHERE tenant = 't1' AND function = '' AND at = $1`, quarter).Scan(&started))
	require.Equal(t, 3, started, "all functions")

	// Sealed quarters are not written again, whatever comes late.
	exec(t, db, `UPDATE stepgate.run SET created_at = $1 WHERE status = 'queued'`, quarter)
	require.NoError(t, w.Work(t.Context(), nil))
	require.NoError(t, db.QueryRow(t.Context(), `SELECT started FROM stepgate.run_series
		WHERE tenant = 't1' AND function = 'work' AND at = $1`, quarter).Scan(&started))
	require.Equal(t, 3, started)
}
