package gateway_test

import (
	"cmp"
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// BenchmarkDashboardReads measures the primary's CPU under a dashboard-heavy load, with
// and without a streaming standby as STEPGATE_DATABASE_READ_URL: a primary and a
// standby of its own, two gateways on them (one without a read URL, one with it, bound
// 1s), runs seeded, then for each gateway in turn a fixed rate of dashboard page views
// (the runs list, the functions' stats, the functions, a run's detail and journal) with
// a light start load beside them, while the CPU time of every process of each
// postmaster is read from /proc. It reports the primary's and the standby's CPU, in
// milliseconds per second of load, and the views served. Not run by default:
//
//	go test -run '^$' -bench BenchmarkDashboardReads -benchtime 1x ./gateway/
//
// STEPGATE_BENCH_VIEWS_PER_SEC (default 50), STEPGATE_BENCH_SECONDS (default 10),
// STEPGATE_BENCH_SEED_RUNS (default 1000) change the load.
func BenchmarkDashboardReads(b *testing.B) {
	rate := benchEnv(b, "STEPGATE_BENCH_VIEWS_PER_SEC", 50)
	seconds := benchEnv(b, "STEPGATE_BENCH_SECONDS", 10)
	seed := benchEnv(b, "STEPGATE_BENCH_SEED_RUNS", 1000)
	primary, url := replicatedPostgres(b)
	standby := startStandby(b, primary)
	plain := stack.Start(b, stack.Options{DatabaseURL: url})
	replicated := stack.Start(b, stack.Options{DatabaseURL: url, ReadDatabaseURL: standby.URL("stepgate"), ReadMaxLag: time.Second})
	app := plain.NewApp()
	functions.Register(app, "dash.steps", func(ctx context.Context, n int) (int, error) {
		sum := 0
		for i := range n {
			v, err := step.Run(ctx, "step "+strconv.Itoa(i), func(context.Context) (int, error) { return i, nil })
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	functions.Register(app, "dash.hello", func(_ context.Context, in string) (string, error) { return "hello " + in, nil })
	plain.Sync(b, plain.ServeApp(b, app))
	c := plain.Client(b, plain.Token)
	ids := seedRuns(b, c, seed)

	for _, tc := range []struct {
		name string
		s    *stack.Stack
	}{{"primary-only", plain}, {"read-url", replicated}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				pBefore, sBefore := cpuOf(b, primary.PID()), cpuOf(b, standby.PID())
				servedBefore := uint64(0)
				if tc.s.Reads != nil {
					servedBefore = tc.s.Reads.Served()
				}
				views, errs, p50 := dashboardLoad(b, tc.s.Client(b, tc.s.Token), ids, rate, time.Duration(seconds)*time.Second)
				pCPU, sCPU := cpuOf(b, primary.PID())-pBefore, cpuOf(b, standby.PID())-sBefore
				secs := float64(seconds)
				b.ReportMetric(float64(pCPU.Milliseconds())/secs, "primary-cpu-ms/s")
				b.ReportMetric(float64(sCPU.Milliseconds())/secs, "standby-cpu-ms/s")
				b.ReportMetric(float64(views)/secs, "views/s")
				b.ReportMetric(float64(errs), "errors")
				b.ReportMetric(float64(p50.Microseconds())/1000, "view-p50-ms")
				if tc.s.Reads != nil {
					b.ReportMetric(float64(tc.s.Reads.Served()-servedBefore)/secs, "replica-reads/s")
				}
			}
		})
	}
}

// seedRuns completes n runs, a third of them with 10 steps, and returns their ids.
func seedRuns(b *testing.B, c *protocol.ClientWithResponses, n int) []string {
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				name, input := "dash.hello", strconv.Quote("run "+strconv.Itoa(i))
				if i%3 == 0 {
					name, input = "dash.steps", "10"
				}
				r, err := c.StartRunWithBodyWithResponse(context.Background(), name, &protocol.StartRunParams{Wait: new("30s")},
					"application/json", strings.NewReader(input))
				if err != nil || r.JSON200 == nil {
					continue // counted below
				}
				mu.Lock()
				ids = append(ids, r.JSON200.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(b, ids, n, "every seeded run completed")
	return ids
}

// dashboardLoad sends rate page views a second for d through c, each the four reads
// of the dashboard's runs and run pages, and one start a second; it returns the views
// served, the failed requests, and the median view's time.
func dashboardLoad(b *testing.B, c *protocol.ClientWithResponses, ids []string, rate int, d time.Duration) (int, int, time.Duration) {
	ctx := context.Background()
	var errs atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	check := func(code int, err error) {
		if err != nil || code != http.StatusOK {
			errs.Add(1)
		}
	}
	view := func() {
		start := time.Now()
		limit := 50
		r1, err := c.ListRunsWithResponse(ctx, &protocol.ListRunsParams{Limit: &limit})
		check(r1.StatusCode(), err)
		window := "24h"
		r2, err := c.FunctionStatsWithResponse(ctx, &protocol.FunctionStatsParams{Window: &window})
		check(r2.StatusCode(), err)
		r3, err := c.ListFunctionsWithResponse(ctx)
		check(r3.StatusCode(), err)
		r4, err := c.GetRunWithResponse(ctx, ids[rand.IntN(len(ids))], nil)
		check(r4.StatusCode(), err)
		mu.Lock()
		took = append(took, time.Since(start))
		mu.Unlock()
	}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		select {
		case sem <- struct{}{}:
		default:
			errs.Add(1) // the gateway is not keeping up: a view dropped
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if n%rate == 0 {
				r, err := c.StartRunWithBodyWithResponse(ctx, "dash.hello", &protocol.StartRunParams{Wait: new("10s")},
					"application/json", strings.NewReader(`"load"`))
				check(r.StatusCode(), err)
			}
			view()
		})
	}
	wg.Wait()
	slices.Sort(took)
	p50 := time.Duration(0)
	if len(took) > 0 {
		p50 = took[len(took)/2]
	}
	return len(took), int(errs.Load()), p50
}

// cpuOf returns the CPU time (user and system) of postmaster pid and its children (its
// backends and workers, each of which leads a process group of its own), with that of
// the children it has reaped (the backends of the connections that closed).
func cpuOf(b *testing.B, pid int) time.Duration {
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(b, err)
	var ticks int64
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // f[0] is field 3, the state
		if len(f) < 15 {
			continue
		}
		fields := f[11:13] // fields 14 and 15: utime, stime
		switch strconv.Itoa(pid) {
		case filepath.Base(filepath.Dir(p)):
			fields = f[11:15] // and 16, 17: cutime, cstime of the reaped children
		case f[1]: // field 4: the parent
		default:
			continue
		}
		for _, field := range fields {
			v, _ := strconv.ParseInt(field, 10, 64)
			ticks += v
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

func benchEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	return cmp.Or(max(n, 0), def)
}
