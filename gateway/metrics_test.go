package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/helpers/metrics"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// scrape GETs url with token (none when empty) and parses the exposition.
func scrape(t require.TestingT, url, token string) map[string]*dto.MetricFamily {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// sample returns the value of the series of name whose labels are exactly labels: a
// counter's or gauge's value, a histogram's sample count; and its histogram's sum.
// ok is false when there is no such series.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (value, sum float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, 0, false
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), 0, true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), 0, true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), m.Histogram.GetSampleSum(), true
		}
	}
	return 0, 0, false
}

func startWaiting(t *testing.T, c *protocol.ClientWithResponses, function, input string) protocol.RunResult {
	t.Helper()
	resp, err := c.StartRunWithBodyWithResponse(t.Context(), function, &protocol.StartRunParams{Wait: ptr("30s")}, "application/json", strings.NewReader(input))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

// TestMetrics scrapes /metrics after some runs: the run counters, the invocation,
// steps, checkpoint and apply histograms moved with the right labels; the queue, River
// and pool gauges are there; and no series carries a tenant.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	for range 3 {
		require.Equal(t, protocol.RunStatusCompleted, startWaiting(t, c, "hello", `{"name":"x"}`).Status)
	}
	require.Equal(t, protocol.RunStatusCompleted, startWaiting(t, c, "chain", `{"steps":3}`).Status)
	require.Equal(t, protocol.RunStatusFailed, startWaiting(t, c, "chain", `{"steps":-1}`).Status)

	fams := scrape(t, s.URL+"/metrics", s.Token)
	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"stepgate_runs_started_total", map[string]string{"function": "hello"}, 3},
		{"stepgate_runs_started_total", map[string]string{"function": "chain"}, 2},
		{"stepgate_runs_finished_total", map[string]string{"function": "hello", "status": "completed"}, 3},
		{"stepgate_runs_finished_total", map[string]string{"function": "chain", "status": "completed"}, 1},
		{"stepgate_runs_finished_total", map[string]string{"function": "chain", "status": "failed"}, 1},
		{"stepgate_runs_finished_total", map[string]string{"function": "hello", "status": "failed"}, 0},
		{"stepgate_invocation_duration_seconds", map[string]string{"function": "hello", "outcome": "completed"}, 3},
		{"stepgate_invocation_duration_seconds", map[string]string{"function": "chain", "outcome": "failed"}, 1},
		{"stepgate_run_steps", map[string]string{"function": "chain"}, 2},
		{"stepgate_queue_stats_up", map[string]string{}, 1},
	} {
		got, _, ok := sample(fams, want.name, want.labels)
		require.True(t, ok, "%s%v is exposed", want.name, want.labels)
		require.Equal(t, want.value, got, "%s%v", want.name, want.labels)
	}
	_, steps, _ := sample(fams, "stepgate_run_steps", map[string]string{"function": "chain"})
	require.Equal(t, 3.0, steps, "3 steps, then 0")
	checkpoints, _, _ := sample(fams, "stepgate_checkpoint_duration_seconds", map[string]string{})
	require.GreaterOrEqual(t, checkpoints, 2.0, "chain's steps 1 and 2; step 3 rides with the answer")
	applies, _, _ := sample(fams, "stepgate_apply_duration_seconds", map[string]string{})
	require.GreaterOrEqual(t, applies, 5.0)
	for _, pool := range []string{"system", "api"} {
		total, _, ok := sample(fams, "stepgate_db_pool_max_conns", map[string]string{"pool": pool})
		require.True(t, ok, pool)
		require.Positive(t, total, pool)
		_, _, ok = sample(fams, "stepgate_db_pool_acquire_total", map[string]string{"pool": pool})
		require.True(t, ok, pool)
	}
	_, _, ok := sample(fams, "stepgate_river_jobs", map[string]string{"state": "available"})
	require.True(t, ok, "River's jobs by state")
	_, _, ok = sample(fams, "stepgate_queue_depth", map[string]string{})
	require.True(t, ok)
	for _, name := range []string{"stepgate_runs_started_total", "stepgate_runs_finished_total"} {
		for _, m := range fams[name].Metric {
			for _, l := range m.Label {
				require.NotEqual(t, "tenant", l.GetName(), "no tenant label unless configured")
			}
		}
	}

	t.Run("QueueDepthCountsDueRuns", func(t *testing.T) {
		// Runs of a function nobody serves stay due: the gauge, read again after its
		// cache lapses, counts them.
		s := stack.Start(t, stack.Options{Workers: 1})
		c := s.Client(t, s.Token)
		reg, err := c.RegisterFunctionWithResponse(t.Context(), "stuck", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/nowhere"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
		_, err = s.Invoker.Drain(t.Context()) // nobody works the queue
		require.NoError(t, err)
		for range 2 {
			resp, err := c.StartRunWithBodyWithResponse(t.Context(), "stuck", nil, "application/json", strings.NewReader(`{}`))
			require.NoError(t, err)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		}
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			fams := scrape(ct, s.URL+"/metrics", s.Token)
			depth, _, _ := sample(fams, "stepgate_queue_depth", map[string]string{})
			assert.Equal(ct, 2.0, depth)
			age, _, _ := sample(fams, "stepgate_queue_oldest_age_seconds", map[string]string{})
			assert.Positive(ct, age)
		}, 3*metrics.CacheFor, 50*time.Millisecond)
	})
}

// TestMetricsTenantLabel: with the tenant label configured, the run counters carry
// each run's tenant.
func TestMetricsTenantLabel(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Metrics: metrics.Config{TenantLabel: true}})
	s.SyncExamples(t)
	startWaiting(t, s.Client(t, s.Token), "hello", `{}`)
	fams := scrape(t, s.URL+"/metrics", s.Token)
	n, _, ok := sample(fams, "stepgate_runs_finished_total", map[string]string{"function": "hello", "status": "completed", "tenant": auth.DefaultTenant})
	require.True(t, ok)
	require.Equal(t, 1.0, n)
	n, _, _ = sample(fams, "stepgate_runs_started_total", map[string]string{"function": "hello", "tenant": auth.DefaultTenant})
	require.Equal(t, 1.0, n)
}

// TestMetricsAreForOperators: /metrics shows every tenant's functions, so no token is
// a 401 and a tenant's token, admin included, a 403; the metrics' own listener serves
// anyone who reaches it.
func TestMetricsAreForOperators(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{MetricsAddr: "127.0.0.1:0"})
	status, body := rawRequest(t, http.MethodGet, s.URL+"/metrics", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, status)
	require.NotEmpty(t, body["detail"])
	status, _ = rawRequest(t, http.MethodGet, s.URL+"/metrics", "not-a-jwt", "", nil)
	require.Equal(t, http.StatusUnauthorized, status)
	admin := s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "t2", Roles: []string{"admin"}})
	status, body = rawRequest(t, http.MethodGet, s.URL+"/metrics", admin, "", nil)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body["detail"], "operators only")

	fams := scrape(t, "http://"+s.MetricsAddr.String()+"/metrics", "")
	require.Contains(t, fams, "stepgate_queue_depth")
	require.Contains(t, fams, "go_goroutines")
}

// TestReadyz: ready when the database answers, the schema is current and River runs;
// a 503 naming what is wrong otherwise.
func TestReadyz(t *testing.T) {
	t.Parallel()
	readyz := func(t require.TestingT, s *stack.Stack) (int, string) {
		req, err := http.NewRequest(http.MethodGet, s.URL+"/readyz", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}

	t.Run("ReadyThenDraining", func(t *testing.T) {
		t.Parallel()
		s := stack.Start(t, stack.Options{})
		code, body := readyz(t, s)
		require.Equal(t, http.StatusOK, code, body)
		s.Server.Drain()
		_, err := s.Invoker.Drain(t.Context())
		require.NoError(t, err)
		code, body = readyz(t, s)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, body, "shutting down")
		require.Contains(t, body, "River's client is not running")
	})

	t.Run("DatabaseUnreachable", func(t *testing.T) {
		t.Parallel()
		proxy := pgtest.NewProxy(t, pgtest.DBURL(t))
		s := stack.Start(t, stack.Options{DatabaseURL: proxy.URL})
		code, body := readyz(t, s)
		require.Equal(t, http.StatusOK, code, body)
		proxy.Cut()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			code, body := readyz(ct, s)
			assert.Equal(ct, http.StatusServiceUnavailable, code)
			assert.Contains(ct, body, "database unreachable")
		}, 30*time.Second, 20*time.Millisecond)
		proxy.Restore()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			code, _ := readyz(ct, s)
			assert.Equal(ct, http.StatusOK, code)
		}, 30*time.Second, 20*time.Millisecond)
	})

	t.Run("SchemaBehind", func(t *testing.T) {
		t.Parallel()
		url := pgtest.DBURL(t)
		conn, err := pgx.Connect(t.Context(), url)
		require.NoError(t, err)
		defer conn.Close(t.Context())
		var last string // as if this build's newest migration had not been applied yet
		require.NoError(t, conn.QueryRow(t.Context(), `DELETE FROM stepgate.schema_migration
			WHERE version = (SELECT max(version) FROM stepgate.schema_migration) RETURNING name`).Scan(&last))
		s := stack.Start(t, stack.Options{DatabaseURL: url})
		code, body := readyz(t, s)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, body, "schema is behind this build: "+last+" not applied")
	})
}
