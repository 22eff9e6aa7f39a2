package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// AddPool collects pool's statistics (pgxpool.Stat) under the label pool=name.
func (m *Metrics) AddPool(name string, pool *pgxpool.Pool) {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	m.pools.pools = append(m.pools.pools, namedPool{name, pool})
}

var (
	poolAcquired = prometheus.NewDesc("stepgate_db_pool_acquired_conns", "Connections in use.", []string{"pool"}, nil)
	poolIdle     = prometheus.NewDesc("stepgate_db_pool_idle_conns", "Idle connections.", []string{"pool"}, nil)
	poolTotal    = prometheus.NewDesc("stepgate_db_pool_total_conns", "Open connections.", []string{"pool"}, nil)
	poolMax      = prometheus.NewDesc("stepgate_db_pool_max_conns", "The pool's bound on connections.", []string{"pool"}, nil)
	poolWaits    = prometheus.NewDesc("stepgate_db_pool_empty_acquire_total", "Acquires that waited for a connection.", []string{"pool"}, nil)
	poolWaitSecs = prometheus.NewDesc("stepgate_db_pool_empty_acquire_wait_seconds_total", "Time spent waiting for a connection.", []string{"pool"}, nil)
	poolAcquires = prometheus.NewDesc("stepgate_db_pool_acquire_total", "Connections acquired.", []string{"pool"}, nil)
)

type namedPool struct {
	name string
	pool *pgxpool.Pool
}

// poolCollector collects the pools added with AddPool.
type poolCollector struct {
	mu    sync.Mutex
	pools []namedPool
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolTotal, poolMax, poolWaits, poolWaitSecs, poolAcquires} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	pools := c.pools
	c.mu.Unlock()
	for _, p := range pools {
		s := p.pool.Stat()
		ch <- prometheus.MustNewConstMetric(poolAcquired, prometheus.GaugeValue, float64(s.AcquiredConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(s.IdleConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.TotalConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()), p.name)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()), p.name)
		ch <- prometheus.MustNewConstMetric(poolWaitSecs, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds(), p.name)
		ch <- prometheus.MustNewConstMetric(poolAcquires, prometheus.CounterValue, float64(s.AcquireCount()), p.name)
	}
}

// Queue is what the queue collector reads from the database at scrape time.
type Queue struct {
	// Queued counts the runs due to start or resume now and waiting for a worker, up
	// to the query's bound; OldestAge is how long the oldest of them has been due.
	Queued    int64
	OldestAge time.Duration
	// Jobs counts River's jobs by state, each up to the query's bound.
	Jobs map[string]int64
}

// CacheFor is how long the queue collector reuses what it read, so that scrapes, however
// frequent, from however many scrapers, query the database at most once per period.
const CacheFor = 5 * time.Second

// AddQueue collects what read returns (see Queue), read at most once per CacheFor and
// given 2s. While read fails, stepgate_queue_stats_up is 0 and the queue's series are
// absent.
func (m *Metrics) AddQueue(read func(context.Context) (Queue, error)) {
	m.reg.MustRegister(&queueCollector{read: read})
}

var (
	queueUp    = prometheus.NewDesc("stepgate_queue_stats_up", "1 when the queue statistics could be read from the database.", nil, nil)
	queueDepth = prometheus.NewDesc("stepgate_queue_depth", "Runs due now and waiting for a worker (bounded count).", nil, nil)
	queueAge   = prometheus.NewDesc("stepgate_queue_oldest_age_seconds", "How long the oldest due run has waited for a worker.", nil, nil)
	riverJobs  = prometheus.NewDesc("stepgate_river_jobs", "River jobs by state (bounded count per state).", []string{"state"}, nil)
)

type queueCollector struct {
	read func(context.Context) (Queue, error)

	mu   sync.Mutex
	at   time.Time
	last Queue
	err  error
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueUp
	ch <- queueDepth
	ch <- queueAge
	ch <- riverJobs
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q, err := c.cached()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(queueUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(queueUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(queueDepth, prometheus.GaugeValue, float64(q.Queued))
	ch <- prometheus.MustNewConstMetric(queueAge, prometheus.GaugeValue, q.OldestAge.Seconds())
	for state, n := range q.Jobs {
		ch <- prometheus.MustNewConstMetric(riverJobs, prometheus.GaugeValue, float64(n), state)
	}
}

// cached returns the last reading when it is fresh, else reads again; concurrent
// scrapes wait for one reading.
func (c *queueCollector) cached() (Queue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < CacheFor {
		return c.last, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.last, c.err = c.read(ctx)
	c.at = time.Now()
	return c.last, c.err
}
