package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/metrics"
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
