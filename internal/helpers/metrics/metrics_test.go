package metrics_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/metrics"
)

// TestFunctionBound: past MaxFunctions distinct names, runs are counted under
// "_other", so a tenant registering many functions cannot multiply the series.
func TestFunctionBound(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Config{MaxFunctions: 2})
	for _, fn := range []string{"a", "b", "c", "d", "a"} {
		m.RunStarted(fn, "t1")
		m.RunFinished(fn, "t1", "completed", 1)
	}
	want := `
# HELP stepgate_runs_started_total Runs whose first invocation began on this gateway.
# TYPE stepgate_runs_started_total counter
stepgate_runs_started_total{function="_other"} 2
stepgate_runs_started_total{function="a"} 2
stepgate_runs_started_total{function="b"} 1
`
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "stepgate_runs_started_total"))
	m.RunFinished("a", "t1", "running", 1) // not a terminal status: ignored
	n, err := testutil.GatherAndCount(m.Registry(), "stepgate_runs_finished_total")
	require.NoError(t, err)
	require.Equal(t, 9, n, "3 functions (a, b, _other) times 3 statuses")
}

// TestTenantLabel: with TenantLabel, the run counters carry the tenant, and the bound
// on functions still holds.
func TestTenantLabel(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Config{TenantLabel: true, MaxFunctions: 1})
	m.RunStarted("a", "t1")
	m.RunStarted("a", "t2")
	m.RunStarted("b", "t2")
	want := `
# HELP stepgate_runs_started_total Runs whose first invocation began on this gateway.
# TYPE stepgate_runs_started_total counter
stepgate_runs_started_total{function="_other",tenant="t2"} 1
stepgate_runs_started_total{function="a",tenant="t1"} 1
stepgate_runs_started_total{function="a",tenant="t2"} 1
`
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "stepgate_runs_started_total"))
}

// TestHotPathDoesNotAllocate: once a function's series exist, recording its runs,
// invocations, checkpoints and answers allocates nothing.
func TestHotPathDoesNotAllocate(t *testing.T) {
	m := metrics.New(metrics.Config{})
	m.RunStarted("f", "t")
	allocs := testing.AllocsPerRun(100, func() {
		m.RunStarted("f", "t")
		m.Invocation("f", "completed", time.Millisecond)
		m.Checkpoint(time.Millisecond)
		m.Apply(time.Millisecond)
		m.RunFinished("f", "t", "completed", 3)
	})
	require.Zero(t, allocs)
}

// TestNilRecordsNothing: a nil *Metrics is a valid recorder.
func TestNilRecordsNothing(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.RunStarted("f", "t")
	m.RunFinished("f", "t", "failed", 1)
	m.Invocation("f", "error", time.Second)
	m.Checkpoint(time.Second)
	m.Apply(time.Second)
}

// TestDashboardUsesExposedMetrics: every stepgate_ metric docs/grafana-stepgate.json
// queries is one the gateway exposes.
func TestDashboardUsesExposedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../docs/grafana-stepgate.json")
	require.NoError(t, err)
	require.True(t, json.Valid(raw))
	m := metrics.New(metrics.Config{})
	m.RunStarted("f", "t")
	m.RunFinished("f", "t", "completed", 1)
	m.Invocation("f", "completed", time.Millisecond)
	m.Checkpoint(time.Millisecond)
	m.Apply(time.Millisecond)
	m.AddQueue(func(context.Context) (metrics.Queue, error) {
		return metrics.Queue{Queued: 1, OldestAge: time.Second, Jobs: map[string]int64{"available": 1}}, nil
	})
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none") // never connects: Stat only
	require.NoError(t, err)
	defer pool.Close()
	m.AddPool("system", pool)
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	exposed := map[string]bool{}
	for _, f := range fams {
		exposed[f.GetName()] = true
	}
	used := regexp.MustCompile(`stepgate_[a-z_]+`).FindAllString(string(raw), -1)
	require.NotEmpty(t, used)
	for _, name := range used {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		require.True(t, exposed[base], "the dashboard queries %s, which the gateway does not expose", name)
	}
}
