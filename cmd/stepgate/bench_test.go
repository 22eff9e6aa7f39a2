package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRunBenchPhase(t *testing.T) {
	t.Parallel()

	// Every seventh request is refused and every fifth run fails, the first of each
	// among the first three requests, so both kinds of error show up in the counts
	// however few requests a loaded machine sends in the phase.
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("wait") != benchWait || string(body) != `{"name":"bench"}` {
			http.Error(w, "bad bench request", http.StatusBadRequest)
			return
		}
		i := n.Add(1)
		switch {
		case i%7 == 1:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"title":"Service Unavailable","status":503,"detail":"overloaded"}`)
		case i%5 == 2:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"r","status":"failed","error":{"type":"boom","message":"x"}}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"r","status":"completed","output":{}}`)
		}
	}))
	t.Cleanup(srv.Close)

	c, _, _ := newTestCLI(nil, "")
	cl, err := c.client(&clientFlags{gateway: srv.URL}, srv.Client())
	require.NoError(t, err)
	cell := runBenchPhase(t.Context(), cl, "hello", benchOnce, benchInput("hello"), 4, 500*time.Millisecond)

	require.Equal(t, "hello", cell.Function)
	require.Equal(t, 4, cell.Concurrency)
	require.Positive(t, cell.Runs)
	require.Equal(t, int(n.Load()), cell.Runs+cell.Errors, "every request is a run or an error")
	require.Positive(t, cell.ErrorKinds["503 Service Unavailable: overloaded"])
	require.Positive(t, cell.ErrorKinds["run failed: boom"])
	require.Equal(t, cell.Errors, cell.ErrorKinds["503 Service Unavailable: overloaded"]+cell.ErrorKinds["run failed: boom"])
	require.GreaterOrEqual(t, cell.Seconds, 0.5)
	require.InDelta(t, float64(cell.Runs)/cell.Seconds, cell.RunsPerSecond, 1e-9)
	require.LessOrEqual(t, cell.stats.P50, cell.stats.P99)
}

func TestWriteBenchReport(t *testing.T) {
	t.Parallel()

	floor := latencyStats{N: 4000, P50: 500 * time.Microsecond, P99: 1200 * time.Microsecond}
	hello := latencyStats{N: 950, P50: 10 * time.Millisecond, P90: 12 * time.Millisecond, P99: 20 * time.Millisecond, Max: 31500 * time.Microsecond}
	rep := &benchReport{
		Gateway: "http://127.0.0.1:18080", GOMAXPROCS: 2, NumCPU: 2, GoVersion: "go1.26.8", Platform: "linux/amd64",
		Duration: "10s", Warmup: "1s",
		Floor: &benchFloor{PostgresVersion: "17.2", Fsync: "on", SynchronousCommit: "on", Latency: newBenchLatency(floor), stats: floor},
		Cells: []benchCell{
			{Function: "hello", Concurrency: 1, Runs: 950, RunsPerSecond: 95, Latency: newBenchLatency(hello), P50FloorRatio: 20, stats: hello},
			{Function: "orders.checkout", Concurrency: 16, Errors: 3, ErrorKinds: map[string]int{"404 Not Found: gone": 3}},
		},
	}
	var b bytes.Buffer
	require.NoError(t, writeBenchReport(&b, rep))
	require.Equal(t, ""+
		"stepgate bench  http://127.0.0.1:18080  GOMAXPROCS=2 NumCPU=2  go1.26.8 linux/amd64  postgres 17.2 fsync=on synchronous_commit=on  (warmup 1s, 10s per cell)\n"+
		"floor: single-row INSERT commit, concurrency 1: p50 0.50ms  p99 1.20ms  (4000 commits)\n"+
		"\n"+
		"FUNCTION         CONC  RUNS  RUNS/S  P50      P90      P99      MAX      ERRORS  P50/FLOOR\n"+
		"hello            1     950   95.0    10.00ms  12.00ms  20.00ms  31.50ms  0       20.0x\n"+
		"orders.checkout  16    0     0.0     -        -        -        -        3       -\n"+
		"\n"+
		"errors of orders.checkout at concurrency 16:\n"+
		"       3  404 Not Found: gone\n", b.String())

	j, err := json.Marshal(rep.Cells[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"function":"hello","concurrency":1,"runs":950,"errors":0,"seconds":0,"runs_per_second":95,
		"latency":{"n":950,"p50_ms":10.000,"p90_ms":12.000,"p99_ms":20.000,"max_ms":31.500},"p50_floor_ratio":20}`, string(j))
}

func TestWriteSleepE2E(t *testing.T) {
	t.Parallel()

	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	s := &benchSleepE2E{Function: "sleep", Sleep: "1s", Runs: 50, Errors: 1, ErrorKinds: map[string]int{"run failed: boom": 1}, Clock: benchSleepClock,
		late:               latencyStats{N: 49, P50: ms(12), P90: ms(20), P99: ms(31), Max: ms(40)},
		toJournaled:        latencyStats{N: 49, P50: ms(4), P90: ms(6), P99: ms(9), Max: ms(10)},
		wakeToFinished:     latencyStats{N: 49, P50: ms(5), P90: ms(8), P99: ms(14), Max: ms(20)},
		finishedToResponse: latencyStats{N: 49, P50: ms(3), P90: ms(6), P99: ms(8), Max: ms(10)},
	}
	var b bytes.Buffer
	require.NoError(t, writeBenchReport(&b, &benchReport{SleepE2E: s}))
	require.Contains(t, b.String(), ""+
		"sleep (e2e): sleep 1s, 50 runs started with ?wait (1 errors): response late by p50 12.00ms  p90 20.00ms  p99 31.00ms  max 40.00ms\n"+
		"  request sent -> sleep journaled (1st invocation)          p50 4.00ms  p90 6.00ms  p99 9.00ms  max 10.00ms\n"+
		"  wake time -> run finished (timer, 2nd invocation, finish) p50 5.00ms  p90 8.00ms  p99 14.00ms  max 20.00ms\n"+
		"  run finished -> response received                         p50 3.00ms  p90 6.00ms  p99 8.00ms  max 10.00ms\n"+
		"  the API exposes no start time of the 2nd invocation: the middle phase runs from the wake time to the run's finish\n"+
		"  clock: phases mix the client's clock (request sent, response received) with the database's (sleep journaled, wake time, run finished): meaningful only when they share one machine, as gateway, Postgres and client do under stepgate dev\n"+
		"\n"+
		"errors of sleep (e2e):\n"+
		"       1  run failed: boom\n")
}

// benchJSON is the part of `stepgate bench --json` the tests below read.
type benchJSON struct {
	Cells []struct {
		Function    string `json:"function"`
		Async       bool   `json:"async"`
		Concurrency int    `json:"concurrency"`
		Runs        int    `json:"runs"`
		Errors      int    `json:"errors"`
		Latency     struct {
			N   int     `json:"n"`
			P50 float64 `json:"p50_ms"`
			Max float64 `json:"max_ms"`
		} `json:"latency"`
		ErrorKinds map[string]int `json:"error_kinds"`
	} `json:"cells"`
	SleepE2E *struct {
		Function   string         `json:"function"`
		Sleep      string         `json:"sleep"`
		Runs       int            `json:"runs"`
		Errors     int            `json:"errors"`
		ErrorKinds map[string]int `json:"error_kinds"`
		Late       struct {
			N int `json:"n"`
		} `json:"late"`
		Clock  string `json:"clock"`
		PerRun []struct {
			RunID              string    `json:"run_id"`
			Sent               time.Time `json:"sent"`
			Journaled          time.Time `json:"journaled"`
			Wake               time.Time `json:"wake"`
			Finished           time.Time `json:"finished"`
			Received           time.Time `json:"received"`
			Late               float64   `json:"late_ms"`
			ToJournaled        float64   `json:"request_to_journaled_ms"`
			WakeToFinished     float64   `json:"wake_to_finished_ms"`
			FinishedToResponse float64   `json:"finished_to_response_ms"`
		} `json:"per_run"`
	} `json:"sleep_e2e"`
}

// TestBenchOnDev runs `stepgate bench --json` against a real "stepgate dev" and checks
// the shape of what its --sleep-e2e and --async measure; never how fast.
func TestBenchOnDev(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts stepgate dev with a private Postgres")
	}
	g := startDev(t)
	bench := func(t *testing.T, args ...string) benchJSON {
		t.Helper()
		c, stdout, stderr := newTestCLI(map[string]string{"STEPGATE_URL": g.url, "STEPGATE_TOKEN": g.token}, "")
		require.NoError(t, c.run(t.Context(), append([]string{"bench", "--json", "--warmup", "0s", "--sleep", "0"}, args...)), stderr.String())
		var rep benchJSON
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
		return rep
	}

	t.Run("SleepE2E", func(t *testing.T) {
		t.Parallel()
		rep := bench(t, "--functions", "hello", "--concurrency", "1", "--duration", "100ms", "--sleep-e2e", "50ms", "--sleep-runs", "3")
		s := rep.SleepE2E
		require.NotNil(t, s)
		require.Equal(t, "sleep", s.Function)
		require.Equal(t, "50ms", s.Sleep)
		require.Equal(t, 3, s.Runs)
		require.Zero(t, s.Errors, s.ErrorKinds)
		require.Equal(t, 3, s.Late.N)
		require.Contains(t, s.Clock, "one machine")
		require.Len(t, s.PerRun, 3)
		for _, r := range s.PerRun {
			require.NotEmpty(t, r.RunID)
			// Client and database clocks are one machine's here, so the times are in order.
			for _, pair := range [][2]time.Time{{r.Sent, r.Journaled}, {r.Journaled, r.Wake}, {r.Wake, r.Finished}, {r.Finished, r.Received}} {
				require.False(t, pair[1].Before(pair[0]), "%+v", r)
			}
			require.Equal(t, 50*time.Millisecond, r.Wake.Sub(r.Journaled), "the wake time is the journaling's now() plus the sleep")
			for _, ms := range []float64{r.Late, r.ToJournaled, r.WakeToFinished, r.FinishedToResponse} {
				require.GreaterOrEqual(t, ms, 0.0, "%+v", r)
			}
			// The phases (wall clocks) add up to the lateness (monotonic clock).
			require.InDelta(t, r.Late, r.ToJournaled+r.WakeToFinished+r.FinishedToResponse, 1, "%+v", r)
		}
	})

	t.Run("Async", func(t *testing.T) {
		t.Parallel()
		rep := bench(t, "--functions", "hello,chain", "--concurrency", "2", "--duration", "300ms", "--async")
		var names []string
		for _, c := range rep.Cells {
			names = append(names, c.Function)
			require.Equal(t, 2, c.Concurrency)
			require.Equal(t, strings.HasSuffix(c.Function, " (async)"), c.Async, c.Function)
			require.Positive(t, c.Runs, c.Function)
			require.Zero(t, c.Errors, "%s: %v", c.Function, c.ErrorKinds)
			require.Equal(t, c.Runs, c.Latency.N)
			require.LessOrEqual(t, c.Latency.P50, c.Latency.Max)
		}
		require.Equal(t, []string{"hello", "hello (async)", "chain", "chain (async)"}, names)
		require.Nil(t, rep.SleepE2E, "--sleep-e2e defaults to 0: skipped")
	})
}
