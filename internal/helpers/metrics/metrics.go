// Package metrics holds a gateway's Prometheus metrics: what the invoker records on its
// hot path (runs started and finished, invocation, checkpoint and apply latencies,
// steps per run), and the collectors read at scrape time (queue depth and age, River's
// jobs by state, the database pools). Each gateway process has its own registry, served
// by [Metrics.Handler].
//
// Cardinality is bounded: the labels are the function name (at most
// Config.MaxFunctions distinct names per process; later ones are counted under
// "_other"), a status or outcome from a fixed list, and the tenant only when
// Config.TenantLabel is set (then times the number of tenants).
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures Metrics.
type Config struct {
	// TenantLabel adds a "tenant" label, the raw tenant id, to the run counters. Off,
	// they have none: series stay bounded by functions times statuses, whatever the
	// number of tenants.
	TenantLabel bool
	// MaxFunctions bounds the distinct function label values of this process; later
	// functions are counted as "_other". Defaults to 500.
	MaxFunctions int
}

// OtherFunction is the function label of the functions past Config.MaxFunctions.
const OtherFunction = "_other"

// Statuses a run finishes with, and outcomes an invocation has: the values of the
// "status" and "outcome" labels.
var (
	finishStatuses = []string{"completed", "failed", "cancelled"}
	// Outcomes: the answer's status, or "error" for an invocation that failed (an HTTP
	// error, a timeout, a refused connection, an answer that does not parse), or
	// "abandoned" when its run ended or went to another gateway meanwhile.
	outcomes = []string{"completed", "failed", "suspended", "error", "abandoned"}
)

// Metrics is a gateway's metrics. A nil *Metrics records nothing, so code paths that
// record take no metrics argument of their own.
type Metrics struct {
	reg          *prometheus.Registry
	tenant       bool
	maxFunctions int64

	runsStarted  *prometheus.CounterVec   // function[, tenant]
	runsFinished *prometheus.CounterVec   // function, status[, tenant]
	invocation   *prometheus.HistogramVec // function, outcome
	steps        *prometheus.HistogramVec // function
	checkpoint   prometheus.Histogram
	apply        prometheus.Histogram

	pools poolCollector

	functions  sync.Map // function name -> *functionMetrics
	nFunctions atomic.Int64
}

// functionMetrics are one function's series, curried once so that recording is a
// lookup and an atomic add, with no allocation.
type functionMetrics struct {
	started    prometheus.Counter
	finished   [3]prometheus.Counter  // by finishStatuses
	invocation [5]prometheus.Observer // by outcomes
	steps      prometheus.Observer
}

// New returns Metrics on a registry of their own, with Go's and the process's
// collectors.
func New(cfg Config) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tenant: cfg.TenantLabel, maxFunctions: int64(cfg.MaxFunctions)}
	if m.maxFunctions <= 0 {
		m.maxFunctions = 500
	}
	started, finished := []string{"function"}, []string{"function", "status"}
	if m.tenant {
		started, finished = append(started, "tenant"), append(finished, "tenant")
	}
	m.runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stepgate_runs_started_total", Help: "Runs whose first invocation began on this gateway.",
	}, started)
	m.runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stepgate_runs_finished_total", Help: "Runs this gateway ended, by terminal status (completed, failed, cancelled).",
	}, finished)
	m.invocation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stepgate_invocation_duration_seconds", Help: "Time from sending an invocation to its answer, by outcome (completed, failed, suspended, error, abandoned).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
	}, []string{"function", "outcome"})
	m.steps = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stepgate_run_steps", Help: "Journal entries of a run when it ends.",
		Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	}, []string{"function"})
	m.checkpoint = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stepgate_checkpoint_duration_seconds", Help: "Time to journal one checkpointed entry.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	m.apply = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stepgate_apply_duration_seconds", Help: "Time to apply an invocation's answer (journal, status, next jobs).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	m.reg.MustRegister(&m.pools, m.runsStarted, m.runsFinished, m.invocation, m.steps, m.checkpoint, m.apply,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry the metrics are registered on, for more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// of returns function's curried series, making them on its first use.
func (m *Metrics) of(function string) *functionMetrics {
	if f, ok := m.functions.Load(function); ok {
		return f.(*functionMetrics)
	}
	if m.nFunctions.Load() >= m.maxFunctions {
		function = OtherFunction
		if f, ok := m.functions.Load(function); ok {
			return f.(*functionMetrics)
		}
	}
	f := &functionMetrics{steps: m.steps.WithLabelValues(function)}
	if !m.tenant {
		f.started = m.runsStarted.WithLabelValues(function)
		for i, st := range finishStatuses {
			f.finished[i] = m.runsFinished.WithLabelValues(function, st)
		}
	}
	for i, o := range outcomes {
		f.invocation[i] = m.invocation.WithLabelValues(function, o)
	}
	if got, loaded := m.functions.LoadOrStore(function, f); loaded {
		return got.(*functionMetrics)
	}
	m.nFunctions.Add(1)
	return f
}

// RunStarted counts a run of function, of tenant, whose first invocation begins.
func (m *Metrics) RunStarted(function, tenant string) {
	if m == nil {
		return
	}
	if m.tenant {
		m.runsStarted.WithLabelValues(m.label(function), tenant).Inc()
		return
	}
	m.of(function).started.Inc()
}

// RunFinished counts a run that ended with status (completed, failed or cancelled;
// anything else is ignored), and observes its steps when steps >= 0.
func (m *Metrics) RunFinished(function, tenant, status string, steps int) {
	if m == nil {
		return
	}
	i := index(finishStatuses, status)
	if i < 0 {
		return
	}
	f := m.of(function)
	if m.tenant {
		m.runsFinished.WithLabelValues(m.label(function), status, tenant).Inc()
	} else {
		f.finished[i].Inc()
	}
	if steps >= 0 {
		f.steps.Observe(float64(steps))
	}
}

// Invocation observes an invocation of function that took d, with outcome (see
// outcomes; anything else counts as "error").
func (m *Metrics) Invocation(function, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	i := index(outcomes, outcome)
	if i < 0 {
		i = index(outcomes, "error")
	}
	m.of(function).invocation[i].Observe(d.Seconds())
}

// Checkpoint observes a checkpoint that took d.
func (m *Metrics) Checkpoint(d time.Duration) {
	if m != nil {
		m.checkpoint.Observe(d.Seconds())
	}
}

// Apply observes the application of an answer that took d.
func (m *Metrics) Apply(d time.Duration) {
	if m != nil {
		m.apply.Observe(d.Seconds())
	}
}

// label is function's label value: itself, or OtherFunction past the bound.
func (m *Metrics) label(function string) string {
	m.of(function)
	if _, ok := m.functions.Load(function); ok {
		return function
	}
	return OtherFunction
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
