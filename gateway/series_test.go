package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal/series"
	"github.com/stepgate/stepgate/protocol"
)

// seedSeriesRuns registers charts.a and charts.b in tenant t1 (and charts.a in t2) and
// inserts runs at known times around base, a minute boundary of the database clock
// ten minutes ago; see TestFunctionSeries for what each bucket then holds.
func seedSeriesRuns(t *testing.T, s *stack.Stack) (t1, t2 *protocol.ClientWithResponses, base time.Time) {
	t.Helper()
	// The runs first, then the functions: the periodic job that seals the day's
	// buckets (maintenance.Series) seals only tenants with functions, and never a bucket
	// twice, so it cannot seal a bucket before its runs are there.
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT date_bin('1 minute', now(), timestamptz '1970-01-01 00:00:00+00') - interval '10 minutes'`).Scan(&base))
	_, err := s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, created_at, started_at, finished_at)
		SELECT gen_random_uuid(), r.tenant, r.function, 1, r.status, '{}', '{}',
			r.at + r.created, r.at + r.started, r.at + r.finished
		FROM (SELECT *, $1::timestamptz AS at FROM (VALUES
			('t1', 'charts.a', 'completed', interval '1 s', interval '1.1 s', interval '61.1 s'),
			('t1', 'charts.a', 'completed', interval '2 s', interval '2.2 s', interval '64.2 s'),
			('t1', 'charts.a', 'failed', interval '3 s', interval '3.3 s', interval '67.3 s'),
			('t1', 'charts.a', 'cancelled', interval '125 s', NULL, interval '130 s'),
			('t1', 'charts.a', 'queued', interval '181 s', NULL, NULL),
			('t1', 'charts.a', 'queued', interval '-2 hours', NULL, NULL),
			('t1', 'charts.b', 'completed', interval '4 s', interval '4.4 s', interval '64.4 s'),
			('t2', 'charts.a', 'completed', interval '5 s', interval '5.5 s', interval '65.5 s')
		) v UNION ALL SELECT *, $2::timestamptz FROM (VALUES
			('t1', 'charts.a', 'completed', interval '1 s', interval '1.5 s', interval '2.5 s'),
			('t1', 'charts.a', 'failed', interval '2 s', interval '3 s', interval '5 s')
		) w) AS r (tenant, function, status, created, started, finished)`, base, sealedQuarter(base))
	require.NoError(t, err)
	t1 = s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	t2 = s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "t2", Roles: []string{"developer"}}))
	for _, c := range []*protocol.ClientWithResponses{t1, t2} {
		app := s.NewApp()
		functions.Register(app, "charts.a", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
		if c == t1 {
			functions.Register(app, "charts.b", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
		}
		synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}
	return t1, t2, base
}

// maintenanceGrace is maintenance.SeriesGrace, which this package cannot import.
const maintenanceGrace = 2 * time.Minute

// sealedQuarter is the quarter hour three hours before base, long sealed.
func sealedQuarter(base time.Time) time.Time {
	return base.Add(-3 * time.Hour).Truncate(15 * time.Minute)
}

// byMinute returns the buckets of a 1h series by their start, checking the series'
// shape on the way.
func byMinute(t *testing.T, series *protocol.FunctionSeries) map[time.Time]protocol.SeriesBucket {
	t.Helper()
	require.Equal(t, "1h", series.Window)
	require.Equal(t, 60, series.BucketSeconds)
	require.Len(t, series.Buckets, 60)
	out := map[time.Time]protocol.SeriesBucket{}
	for i, b := range series.Buckets {
		if i > 0 {
			require.Equal(t, time.Minute, b.At.Sub(series.Buckets[i-1].At), "no gaps")
		}
		out[b.At.UTC()] = b
	}
	return out
}

func TestFunctionSeries(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	t1, t2, base := seedSeriesRuns(t, s)
	minute := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute).UTC() }
	// What the periodic job does every minute, at once.
	_, err := series.SealSeries(t.Context(), s.Pool, maintenanceGrace, 200)
	require.NoError(t, err)

	t.Run("OneFunctionPerMinute", func(t *testing.T) {
		resp, err := t1.GetFunctionSeriesWithResponse(t.Context(), "charts.a", &protocol.GetFunctionSeriesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, "charts.a", *resp.JSON200.Function)
		b := byMinute(t, resp.JSON200)

		// base: three runs created and claimed after 100, 200 and 300 ms.
		require.Equal(t, []int64{3, 0, 0, 0, 1}, counts(b[minute(0)]))
		require.InDelta(t, 200, *b[minute(0)].WaitP50Ms, 0.01)
		require.InDelta(t, 290, *b[minute(0)].WaitP95Ms, 0.01)
		require.Nil(t, b[minute(0)].P50Ms)
		// base+1: they finish after 60, 62 and 64 s, the last failed.
		require.Equal(t, []int64{0, 2, 1, 0, 1}, counts(b[minute(1)]))
		require.InDelta(t, 62000, *b[minute(1)].P50Ms, 0.5)
		require.InDelta(t, 63800, *b[minute(1)].P95Ms, 0.5)
		require.Nil(t, b[minute(1)].WaitP50Ms)
		// base+2: one created and cancelled before it was claimed.
		require.Equal(t, []int64{1, 0, 0, 1, 1}, counts(b[minute(2)]))
		require.Nil(t, b[minute(2)].P50Ms, "a cancellation has no duration")
		// base+3 on: one more waits; the one created two hours ago waits all along.
		require.Equal(t, []int64{1, 0, 0, 0, 2}, counts(b[minute(3)]))
		require.Equal(t, []int64{0, 0, 0, 0, 1}, counts(b[minute(-1)]))
		last := resp.JSON200.Buckets[59]
		require.Equal(t, []int64{0, 0, 0, 0, 2}, counts(last))
		var started int64
		for _, x := range resp.JSON200.Buckets {
			started += x.Started
		}
		require.EqualValues(t, 5, started, "the run created two hours ago is not in the last hour")
	})

	t.Run("OneFunctionPerQuarterHour", func(t *testing.T) {
		resp, err := t1.GetFunctionSeriesWithResponse(t.Context(), "charts.a",
			&protocol.GetFunctionSeriesParams{Window: ptr(protocol.GetFunctionSeriesParamsWindow("1d"))})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, 900, resp.JSON200.BucketSeconds)
		require.Len(t, resp.JSON200.Buckets, 96)
		var sum [5]int64
		var q *protocol.SeriesBucket
		for _, x := range resp.JSON200.Buckets {
			if x.At.Equal(sealedQuarter(base)) {
				q = &x
			}
			require.Zero(t, x.At.Unix()%900, "aligned on quarter hours")
			c := counts(x)
			for i := range 4 {
				sum[i] += c[i]
			}
		}
		sum[4] = resp.JSON200.Buckets[95].QueueDepth
		require.Equal(t, [5]int64{8, 3, 2, 1, 2}, sum)

		// Three hours ago: read from the bucket sealed in stepgate.run_series.
		var sealed bool
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM stepgate.run_series
			WHERE tenant = 't1' AND function = 'charts.a' AND at = $1 AND started = 2)`, sealedQuarter(base)).Scan(&sealed))
		require.True(t, sealed, "the quarter three hours ago is sealed")
		require.NotNil(t, q)
		require.Equal(t, []int64{2, 1, 1, 0, 0}, counts(*q), "the run queued two hours ago is not there yet")
		require.InDelta(t, 1500, *q.P50Ms, 0.01)
		require.InDelta(t, 1950, *q.P95Ms, 0.01)
		require.InDelta(t, 750, *q.WaitP50Ms, 0.01)
		require.InDelta(t, 975, *q.WaitP95Ms, 0.01)

		// It is the sealed bucket that is read, not the runs again: change it, and the
		// answer changes.
		_, err = s.Pool.Exec(t.Context(), `WITH d AS (DELETE FROM stepgate.run_series
				WHERE tenant = 't1' AND function = 'charts.a' AND at = $1 RETURNING *)
			INSERT INTO stepgate.run_series SELECT tenant, function, at, 7, claimed, completed, failed, cancelled, unclaimed, duration_ms, wait_ms FROM d`,
			sealedQuarter(base))
		require.NoError(t, err)
		again, err := t1.GetFunctionSeriesWithResponse(t.Context(), "charts.a",
			&protocol.GetFunctionSeriesParams{Window: ptr(protocol.GetFunctionSeriesParamsWindow("1d"))})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
		for _, x := range again.JSON200.Buckets {
			if x.At.Equal(sealedQuarter(base)) {
				require.EqualValues(t, 7, x.Started)
			}
		}
	})

	t.Run("AllFunctions", func(t *testing.T) {
		resp, err := t1.FunctionsSeriesWithResponse(t.Context(), &protocol.FunctionsSeriesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Nil(t, resp.JSON200.Function)
		b := byMinute(t, resp.JSON200)
		require.Equal(t, []int64{4, 0, 0, 0, 1}, counts(b[minute(0)]))
		require.Equal(t, []int64{0, 3, 1, 0, 1}, counts(b[minute(1)]))

		day, err := t1.FunctionsSeriesWithResponse(t.Context(), &protocol.FunctionsSeriesParams{Window: ptr(protocol.FunctionsSeriesParamsWindow("1d"))})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, day.StatusCode(), string(day.Body))
		var started, completed int64
		for _, x := range day.JSON200.Buckets {
			started += x.Started
			completed += x.Completed
		}
		require.Equal(t, []int64{9, 4}, []int64{started, completed})
		// durations 60, 60, 62 and 64 s
		require.InDelta(t, 61000, *b[minute(1)].P50Ms, 0.5)
		require.InDelta(t, 63700, *b[minute(1)].P95Ms, 0.5)
	})

	t.Run("OtherTenantSeesNothing", func(t *testing.T) {
		resp, err := t2.GetFunctionSeriesWithResponse(t.Context(), "charts.a", &protocol.GetFunctionSeriesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		b := byMinute(t, resp.JSON200)
		require.Equal(t, []int64{1, 0, 0, 0, 0}, counts(b[minute(0)]), "its own run only")
		require.Equal(t, []int64{0, 1, 0, 0, 0}, counts(b[minute(1)]))
		for _, x := range resp.JSON200.Buckets {
			require.Zero(t, x.QueueDepth)
		}
		all, err := t2.FunctionsSeriesWithResponse(t.Context(), &protocol.FunctionsSeriesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, all.StatusCode(), string(all.Body))
		var started int64
		for _, x := range all.JSON200.Buckets {
			started += x.Started
		}
		require.EqualValues(t, 1, started)
		missing, err := t2.GetFunctionSeriesWithResponse(t.Context(), "charts.b", &protocol.GetFunctionSeriesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, missing.StatusCode(), "t1's function")
	})

	t.Run("OnlyTheTwoWindows", func(t *testing.T) {
		for _, w := range []string{"2h", "24h", "1m", "7d"} {
			resp, err := t1.GetFunctionSeriesWithResponse(t.Context(), "charts.a",
				&protocol.GetFunctionSeriesParams{Window: ptr(protocol.GetFunctionSeriesParamsWindow(w))})
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), w)
			require.Equal(t, `window "`+w+`" is not one of 1h (per minute) and 1d (per 15 minutes)`, resp.ApplicationProblemJSON400.Detail)
			all, err := t1.FunctionsSeriesWithResponse(t.Context(),
				&protocol.FunctionsSeriesParams{Window: ptr(protocol.FunctionsSeriesParamsWindow(w))})
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, all.StatusCode(), w)
		}
	})
}

// counts returns a bucket's started, completed, failed and cancelled runs and its queue
// depth.
func counts(b protocol.SeriesBucket) []int64 {
	return []int64{b.Started, b.Completed, b.Failed, b.Cancelled, b.QueueDepth}
}
