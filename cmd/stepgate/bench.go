package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/protocol"
)

// Bench settings that have no flag.
const (
	benchWait          = "30s"            // the ?wait= of every benchmark request
	benchRequestLimit  = 35 * time.Second // a request's client-side bound: the wait plus slack
	benchMaxErrorKinds = 10               // distinct error messages kept per cell; the rest count as "other"
	benchConnectLimit  = 10 * time.Second // connecting to Postgres for the floor
	// benchDefaultStreamsPerSubject is a gateway's default STEPGATE_MAX_STREAMS_PER_SUBJECT,
	// which the result long-polls of async cells count against.
	benchDefaultStreamsPerSubject = 10
)

// benchInputs are the inputs the benchmark sends to the example functions;
// other functions get {}.
var benchInputs = map[string]string{
	"hello":           `{"name":"bench"}`,
	"hello.limited":   `{"name":"bench"}`,
	"orders.checkout": `{}`,
	"chain":           `{"steps":10}`,
}

// benchKeys is how many concurrency keys the runs of hello.keyed spread over (one
// running at a time per key): run i has the key k-<i mod benchKeys>.
const benchKeys = 100

// benchInput returns what makes each run's input of fn.
func benchInput(fn string) func() []byte {
	if fn == "hello.keyed" {
		var n atomic.Int64
		return func() []byte { return fmt.Appendf(nil, `{"name":"bench","key":"k-%d"}`, n.Add(1)%benchKeys) }
	}
	input := []byte(benchInputs[fn])
	if len(input) == 0 {
		input = []byte(`{}`)
	}
	return func() []byte { return input }
}

// benchOptions are the parsed arguments of "stepgate bench".
type benchOptions struct {
	client      *clientFlags
	functions   []string
	concurrency []int
	duration    time.Duration
	warmup      time.Duration
	floor       time.Duration
	databaseURL string
	sleep       time.Duration
	sleepRuns   int
	sleepE2E    time.Duration
	async       bool
	events      int
	waiters     int
}

// parseBench parses the bench command line; --database-url defaults to
// $DATABASE_URL.
func (c *cli) parseBench(args []string) (*benchOptions, error) {
	fs := c.newFlagSet("bench", "[--functions hello,orders.checkout,chain] [--concurrency 1,16] [--duration 10s] [--warmup 1s] [--database-url URL]")
	o := &benchOptions{client: addClientFlags(fs, true)}
	functions := fs.String("functions", "hello,orders.checkout,chain", "comma-separated `NAMES` of registered functions to run")
	concurrency := fs.String("concurrency", "1,16", "comma-separated `LEVELS`: client goroutines per cell")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each (function, concurrency) cell is measured")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "how long each cell runs unmeasured first")
	fs.DurationVar(&o.floor, "floor-duration", 2*time.Second, "how long the commit floor is measured")
	fs.DurationVar(&o.sleep, "sleep", time.Second, "also measure how late runs of orders.checkout wake from a sleep this long (0: skip)")
	fs.IntVar(&o.sleepRuns, "sleep-runs", 50, "how many sleeping runs to measure (--sleep, --sleep-e2e), started 20ms apart")
	fs.DurationVar(&o.sleepE2E, "sleep-e2e", 0, "also time --sleep-runs starts with ?wait of the example function sleep sleeping this long, end to end (0: skip)")
	fs.BoolVar(&o.async, "async", false, "also measure each function and concurrency starting runs without ?wait, each client waiting on the run's result long-poll")
	fs.IntVar(&o.events, "events", 0, "also measure `N` events, one at a time, each resuming a run of orders.await_payment that waits for it (0: skip)")
	fs.IntVar(&o.waiters, "event-waiters", 0, "with --events: first start `N` other runs that wait for the same event name with other keys")
	fs.StringVar(&o.databaseURL, "database-url", "", "the gateway's Postgres `URL`, to measure the commit floor (default $DATABASE_URL; none: no floor)")
	if _, err := parseCommand(fs, args); err != nil {
		return nil, err
	}
	if o.databaseURL == "" {
		o.databaseURL = c.getenv("DATABASE_URL")
	}
	o.functions = splitList(*functions)
	if len(o.functions) == 0 {
		return nil, usagef("bench: --functions names no function")
	}
	for _, s := range splitList(*concurrency) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, usagef("bench: --concurrency: %q is not a positive integer", s)
		}
		o.concurrency = append(o.concurrency, n)
	}
	if len(o.concurrency) == 0 {
		return nil, usagef("bench: --concurrency names no level")
	}
	if o.duration <= 0 || o.floor <= 0 || o.warmup < 0 {
		return nil, usagef("bench: --duration and --floor-duration must be positive, --warmup not negative")
	}
	if o.sleepE2E < 0 || o.sleepE2E > benchMaxSleepE2E {
		return nil, usagef("bench: --sleep-e2e must be from 0s to %s (its ?wait is the sleep plus 30s, at most 15m)", benchMaxSleepE2E)
	}
	return o, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// millis is a duration that marshals to JSON as fractional milliseconds.
type millis time.Duration

// MarshalJSON writes m in milliseconds with microsecond precision.
func (m millis) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(m)/float64(time.Millisecond), 'f', 3, 64), nil
}

// benchLatency is the JSON form of latencyStats.
type benchLatency struct {
	N   int    `json:"n"`
	P50 millis `json:"p50_ms"`
	P90 millis `json:"p90_ms"`
	P99 millis `json:"p99_ms"`
	Max millis `json:"max_ms"`
}

func newBenchLatency(s latencyStats) benchLatency {
	return benchLatency{N: s.N, P50: millis(s.P50), P90: millis(s.P90), P99: millis(s.P99), Max: millis(s.Max)}
}

// benchFloor is the latency of one single-row INSERT commit on the
// gateway's database at concurrency 1: a lower bound for anything durable.
type benchFloor struct {
	PostgresVersion   string       `json:"postgres_version"`
	Fsync             string       `json:"fsync"`
	SynchronousCommit string       `json:"synchronous_commit"`
	Latency           benchLatency `json:"latency"`
	stats             latencyStats
}

// benchCell is the result of one (function, concurrency) cell. Latencies are
// of completed runs; everything else is counted in Errors by message. An async
// cell (Function "NAME (async)") starts its runs without ?wait and waits for
// each on its result's long-poll; its latency is from the start's request to
// the long-poll's answer.
type benchCell struct {
	Function      string         `json:"function"`
	Async         bool           `json:"async,omitempty"`
	Concurrency   int            `json:"concurrency"`
	Runs          int            `json:"runs"`
	Errors        int            `json:"errors"`
	ErrorKinds    map[string]int `json:"error_kinds,omitempty"`
	Seconds       float64        `json:"seconds"`
	RunsPerSecond float64        `json:"runs_per_second"`
	Latency       benchLatency   `json:"latency"`
	P50FloorRatio float64        `json:"p50_floor_ratio,omitempty"`
	stats         latencyStats
}

// benchReport is everything "stepgate bench" measured.
type benchReport struct {
	Gateway    string         `json:"gateway"`
	GOMAXPROCS int            `json:"gomaxprocs"`
	NumCPU     int            `json:"num_cpu"`
	GoVersion  string         `json:"go_version"`
	Platform   string         `json:"platform"`
	Duration   string         `json:"duration"`
	Warmup     string         `json:"warmup"`
	Floor      *benchFloor    `json:"floor,omitempty"`
	Cells      []benchCell    `json:"cells"`
	Sleeps     []*benchSleep  `json:"sleeps,omitempty"`
	SleepE2E   *benchSleepE2E `json:"sleep_e2e,omitempty"`
	Events     *benchEvents   `json:"events,omitempty"`
}

// bench runs "stepgate bench": it drives a running gateway with runs of each
// function at each concurrency level, measures the commit floor of its
// database, and prints the latencies. It stops after about
// (functions × levels × (warmup + duration)), twice that with --async, plus
// the floor's 2s and the sleeps'.
func (c *cli) bench(ctx context.Context, args []string) error {
	o, err := c.parseBench(args)
	if err != nil {
		return err
	}
	base, err := c.gatewayURL(o.client)
	if err != nil {
		return err
	}
	// One shared client whose idle pool holds a connection per goroutine, so
	// that the benchmark measures the gateway and not TCP handshakes.
	maxConc := slices.Max(o.concurrency)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = maxConc
	tr.MaxIdleConns = max(tr.MaxIdleConns, maxConc)
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	cl, err := c.client(o.client, hc)
	if err != nil {
		return err
	}
	if err := benchPreflight(ctx, cl, o.functions); err != nil {
		return err
	}
	if o.sleepE2E > 0 && o.sleepRuns > 0 {
		if err := benchPreflight(ctx, cl, []string{benchSleepFunction}); err != nil {
			return err
		}
	}
	if o.async && maxConc > benchDefaultStreamsPerSubject {
		fmt.Fprintf(c.stderr, "bench: each client of an async cell holds a result long-poll open; a gateway allows %d per subject unless STEPGATE_MAX_STREAMS_PER_SUBJECT says more (429s past it)\n", benchDefaultStreamsPerSubject)
	}

	rep := &benchReport{
		Gateway:    base,
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		GoVersion:  runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		Duration:   o.duration.String(),
		Warmup:     o.warmup.String(),
	}
	if o.databaseURL != "" {
		fmt.Fprintf(c.stderr, "bench: measuring the commit floor for %s\n", o.floor)
		floor, err := measureFloor(ctx, o.databaseURL, o.floor)
		if err != nil {
			return err
		}
		rep.Floor = floor
	} else {
		fmt.Fprintln(c.stderr, "bench: no --database-url or DATABASE_URL: skipping the commit floor")
	}

	for _, fn := range o.functions {
		input := benchInput(fn)
		for _, conc := range o.concurrency {
			for _, async := range []bool{false, true} {
				if async && !o.async {
					continue
				}
				once, name := benchOnce, fn
				if async {
					once, name = benchOnceAsync, fn+" (async)"
				}
				fmt.Fprintf(c.stderr, "bench: %s at concurrency %d for %s (+%s warmup)\n", name, conc, o.duration, o.warmup)
				if o.warmup > 0 {
					runBenchPhase(ctx, cl, fn, once, input, conc, o.warmup)
				}
				cell := runBenchPhase(ctx, cl, fn, once, input, conc, o.duration)
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("bench interrupted: %w", err)
				}
				cell.Function, cell.Async = name, async
				if rep.Floor != nil && rep.Floor.stats.P50 > 0 && cell.stats.N > 0 {
					cell.P50FloorRatio = float64(cell.stats.P50) / float64(rep.Floor.stats.P50)
				}
				rep.Cells = append(rep.Cells, cell)
			}
		}
	}

	for _, fn := range []string{"orders.checkout", "orders.checkout_inline"} {
		if o.sleep <= 0 || o.sleepRuns <= 0 || !slices.Contains(o.functions, fn) {
			continue
		}
		fmt.Fprintf(c.stderr, "bench: %d runs of %s sleeping %s\n", o.sleepRuns, fn, o.sleep)
		rep.Sleeps = append(rep.Sleeps, measureSleep(ctx, cl, fn, o.sleep, o.sleepRuns, 20*time.Millisecond))
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench interrupted: %w", err)
		}
	}

	if o.sleepE2E > 0 && o.sleepRuns > 0 {
		fmt.Fprintf(c.stderr, "bench: %d runs of %s sleeping %s, each started with ?wait\n", o.sleepRuns, benchSleepFunction, o.sleepE2E)
		rep.SleepE2E = measureSleepE2E(ctx, cl, o.sleepE2E, o.sleepRuns, 20*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench interrupted: %w", err)
		}
	}

	if o.events > 0 {
		if err := benchPreflight(ctx, cl, []string{benchEventFunction}); err != nil {
			return err
		}
		rep.Events, err = measureEvents(ctx, cl, o.databaseURL, o.events, o.waiters, func(f string, a ...any) { fmt.Fprintf(c.stderr, f, a...) })
		if err != nil {
			return err
		}
	}

	if o.client.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeBenchReport(c.stdout, rep)
}

// benchPreflight checks that the gateway answers and knows every function,
// so that a typo fails at once instead of as a cell full of 404s.
func benchPreflight(ctx context.Context, cl *protocol.ClientWithResponses, functions []string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	for _, fn := range functions {
		resp, err := cl.GetFunctionWithResponse(ctx, fn)
		if err != nil {
			return requestError("bench: get function "+fn, err)
		}
		if err := expect(resp, http.StatusOK); err != nil {
			return fmt.Errorf("bench: function %s: %w", fn, err)
		}
	}
	return nil
}

// benchWorker is what one client goroutine of a phase records.
type benchWorker struct {
	latencies []time.Duration
	errors    map[string]int
}

// benchOnceFunc starts one run of fn with input and waits for its end; it
// reports whether the run completed, and if not, kind says why.
type benchOnceFunc func(ctx context.Context, cl *protocol.ClientWithResponses, fn string, input []byte) (ok bool, kind string)

// runBenchPhase runs conc goroutines that each start runs of fn with once and
// wait for their results, back to back, until d has passed; a request in flight
// at the end is finished and counted. It returns the phase's cell.
func runBenchPhase(ctx context.Context, cl *protocol.ClientWithResponses, fn string, once benchOnceFunc, input func() []byte, conc int, d time.Duration) benchCell {
	workers := make([]benchWorker, conc)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			w := &workers[i]
			w.errors = map[string]int{}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				ok, kind := once(ctx, cl, fn, input())
				if ctx.Err() != nil {
					return // interrupted: neither a latency nor an error of the gateway
				}
				if ok {
					w.latencies = append(w.latencies, time.Since(t0))
				} else {
					w.errors[kind]++
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	cell := benchCell{Function: fn, Concurrency: conc, Seconds: elapsed.Seconds(), ErrorKinds: map[string]int{}}
	var all []time.Duration
	for _, w := range workers {
		all = append(all, w.latencies...)
		for k, n := range w.errors {
			cell.Errors += n
			if _, seen := cell.ErrorKinds[k]; !seen && len(cell.ErrorKinds) >= benchMaxErrorKinds {
				k = "other"
			}
			cell.ErrorKinds[k] += n
		}
	}
	cell.stats = summarize(all)
	cell.Latency = newBenchLatency(cell.stats)
	cell.Runs = cell.stats.N
	if elapsed > 0 {
		cell.RunsPerSecond = float64(cell.Runs) / elapsed.Seconds()
	}
	return cell
}

// benchOnce starts one run of fn with ?wait and reports whether it
// completed; if not, kind says why.
func benchOnce(ctx context.Context, cl *protocol.ClientWithResponses, fn string, input []byte) (ok bool, kind string) {
	ctx, cancel := context.WithTimeout(ctx, benchRequestLimit)
	defer cancel()
	wait := benchWait
	resp, err := cl.StartRunWithBodyWithResponse(ctx, fn, &protocol.StartRunParams{Wait: &wait}, "application/json", bytes.NewReader(input))
	if err != nil {
		return false, truncate(err.Error(), 120)
	}
	switch code := resp.StatusCode(); {
	case code == http.StatusOK && resp.JSON200 != nil:
		return benchResult(resp.JSON200)
	case code == http.StatusAccepted:
		status := "unknown"
		if resp.JSON202 != nil {
			status = string(resp.JSON202.Status)
		}
		return false, fmt.Sprintf("202 not finished within %s (status %s)", benchWait, status)
	default:
		return false, truncate(problemError(code, resp.Body).Error(), 120)
	}
}

// benchOnceAsync starts one run of fn without ?wait, which queues it as a River
// job (invoker.StartRun), and waits for its result on GET /v1/runs/{id}/result
// with ?wait; it reports whether the run completed, and if not, kind says why.
func benchOnceAsync(ctx context.Context, cl *protocol.ClientWithResponses, fn string, input []byte) (ok bool, kind string) {
	ctx, cancel := context.WithTimeout(ctx, benchRequestLimit)
	defer cancel()
	resp, err := cl.StartRunWithBodyWithResponse(ctx, fn, &protocol.StartRunParams{}, "application/json", bytes.NewReader(input))
	if err != nil {
		return false, truncate(err.Error(), 120)
	}
	var id string
	switch code := resp.StatusCode(); {
	case code == http.StatusAccepted && resp.JSON202 != nil:
		id = resp.JSON202.ID
	case code == http.StatusOK && resp.JSON200 != nil: // ended already
		return benchResult(resp.JSON200)
	default:
		return false, truncate(problemError(code, resp.Body).Error(), 120)
	}
	wait := benchWait
	res, err := cl.GetRunResultWithResponse(ctx, id, &protocol.GetRunResultParams{Wait: &wait})
	if err != nil {
		return false, truncate(err.Error(), 120)
	}
	switch code := res.StatusCode(); {
	case code == http.StatusOK && res.JSON200 != nil:
		return benchResult(res.JSON200)
	case code == http.StatusAccepted:
		status := "unknown"
		if res.JSON202 != nil {
			status = string(res.JSON202.Status)
		}
		return false, fmt.Sprintf("result: 202 not finished within %s (status %s)", benchWait, status)
	default:
		return false, truncate("result: "+problemError(code, res.Body).Error(), 120)
	}
}

// benchResult reports whether a finished run completed, and if not, why.
func benchResult(r *protocol.RunResult) (ok bool, kind string) {
	if r.Status == protocol.RunStatusCompleted {
		return true, ""
	}
	k := "run " + string(r.Status)
	if e := r.Error; e != nil {
		k += ": " + e.Type
	}
	return false, k
}

// measureFloor connects to the database, reads its durability settings and
// measures single-row INSERT commits at concurrency 1 for d, into the table
// stepgate_bench_floor (created if needed; it only ever holds bench rows).
func measureFloor(ctx context.Context, databaseURL string, d time.Duration) (*benchFloor, error) {
	cctx, cancel := context.WithTimeout(ctx, benchConnectLimit)
	defer cancel()
	conn, err := pgx.Connect(cctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to database for the floor: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	f := &benchFloor{}
	for _, s := range []struct {
		name string
		dst  *string
	}{{"server_version", &f.PostgresVersion}, {"fsync", &f.Fsync}, {"synchronous_commit", &f.SynchronousCommit}} {
		if err := conn.QueryRow(ctx, "SHOW "+s.name).Scan(s.dst); err != nil {
			return nil, fmt.Errorf("bench: show %s: %w", s.name, err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS stepgate_bench_floor (id bigserial PRIMARY KEY, v int)`); err != nil {
		return nil, fmt.Errorf("bench: create table stepgate_bench_floor: %w", err)
	}
	const insert = `INSERT INTO stepgate_bench_floor (v) VALUES ($1)`
	// Warm the connection's prepared statement and the table's pages.
	for i := range 10 {
		if _, err := conn.Exec(ctx, insert, i); err != nil {
			return nil, fmt.Errorf("bench: insert into stepgate_bench_floor: %w", err)
		}
	}
	var samples []time.Duration
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		t0 := time.Now()
		if _, err := conn.Exec(ctx, insert, i); err != nil {
			return nil, fmt.Errorf("bench: insert into stepgate_bench_floor: %w", err)
		}
		samples = append(samples, time.Since(t0))
	}
	f.stats = summarize(samples)
	f.Latency = newBenchLatency(f.stats)
	return f, nil
}

// formatMillis prints d in milliseconds with two decimals.
func formatMillis(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
}

// writeBenchReport prints the machine facts, the floor and one table row per
// cell, then any errors by message.
func writeBenchReport(w io.Writer, rep *benchReport) error {
	pg := "postgres: unknown (no --database-url)"
	if f := rep.Floor; f != nil {
		pg = fmt.Sprintf("postgres %s fsync=%s synchronous_commit=%s", f.PostgresVersion, f.Fsync, f.SynchronousCommit)
	}
	fmt.Fprintf(w, "stepgate bench  %s  GOMAXPROCS=%d NumCPU=%d  %s %s  %s  (warmup %s, %s per cell)\n",
		rep.Gateway, rep.GOMAXPROCS, rep.NumCPU, rep.GoVersion, rep.Platform, pg, rep.Warmup, rep.Duration)
	if f := rep.Floor; f != nil {
		fmt.Fprintf(w, "floor: single-row INSERT commit, concurrency 1: p50 %s  p99 %s  (%d commits)\n",
			formatMillis(f.stats.P50), formatMillis(f.stats.P99), f.stats.N)
	} else {
		fmt.Fprintln(w, "floor: not measured")
	}
	fmt.Fprintln(w)

	tw := newTable(w)
	fmt.Fprintln(tw, "FUNCTION\tCONC\tRUNS\tRUNS/S\tP50\tP90\tP99\tMAX\tERRORS\tP50/FLOOR")
	for _, c := range rep.Cells {
		ratio := "-"
		if c.P50FloorRatio > 0 {
			ratio = strconv.FormatFloat(c.P50FloorRatio, 'f', 1, 64) + "x"
		}
		lat := []string{"-", "-", "-", "-"}
		if c.stats.N > 0 {
			lat = []string{formatMillis(c.stats.P50), formatMillis(c.stats.P90), formatMillis(c.stats.P99), formatMillis(c.stats.Max)}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t%d\t%s\n",
			c.Function, c.Concurrency, c.Runs, c.RunsPerSecond, strings.Join(lat, "\t"), c.Errors, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range rep.Sleeps {
		fmt.Fprintf(w, "\n%s: sleep %s, %d runs (%d errors): woke late by p50 %s  p90 %s  p99 %s  max %s\n",
			s.Function, s.Sleep, s.Runs, s.Errors, formatMillis(s.stats.P50), formatMillis(s.stats.P90), formatMillis(s.stats.P99), formatMillis(s.stats.Max))
	}
	if s := rep.SleepE2E; s != nil {
		writeSleepE2E(w, s)
	}
	if e := rep.Events; e != nil {
		fmt.Fprintf(w, "\nevents: %d runs resumed, %d others waiting (%d errors): event to run's end p50 %s  p90 %s  p99 %s  max %s\n",
			e.Runs, e.Others, e.Errors, formatMillis(e.stats.P50), formatMillis(e.stats.P90), formatMillis(e.stats.P99), formatMillis(e.stats.Max))
	}
	for _, c := range rep.Cells {
		if c.Errors == 0 {
			continue
		}
		fmt.Fprintf(w, "\nerrors of %s at concurrency %d:\n", c.Function, c.Concurrency)
		writeErrorKinds(w, c.ErrorKinds)
	}
	if s := rep.SleepE2E; s != nil && s.Errors > 0 {
		fmt.Fprintf(w, "\nerrors of %s (e2e):\n", s.Function)
		writeErrorKinds(w, s.ErrorKinds)
	}
	return nil
}

func writeErrorKinds(w io.Writer, kinds map[string]int) {
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		fmt.Fprintf(w, "  %6d  %s\n", kinds[k], k)
	}
}

// writeSleepE2E prints --sleep-e2e's lateness, its phases and the clocks' caveat.
func writeSleepE2E(w io.Writer, s *benchSleepE2E) {
	fmt.Fprintf(w, "\n%s (e2e): sleep %s, %d runs started with ?wait (%d errors): response late by p50 %s  p90 %s  p99 %s  max %s\n",
		s.Function, s.Sleep, s.Runs, s.Errors, formatMillis(s.late.P50), formatMillis(s.late.P90), formatMillis(s.late.P99), formatMillis(s.late.Max))
	for _, p := range []struct {
		name string
		st   latencyStats
	}{
		{"request sent -> sleep journaled (1st invocation)", s.toJournaled},
		{"wake time -> run finished (timer, 2nd invocation, finish)", s.wakeToFinished},
		{"run finished -> response received", s.finishedToResponse},
	} {
		fmt.Fprintf(w, "  %-57s p50 %s  p90 %s  p99 %s  max %s\n", p.name,
			formatMillis(p.st.P50), formatMillis(p.st.P90), formatMillis(p.st.P99), formatMillis(p.st.Max))
	}
	fmt.Fprintln(w, "  the API exposes no start time of the 2nd invocation: the middle phase runs from the wake time to the run's finish")
	fmt.Fprintf(w, "  clock: %s\n", s.Clock)
}
