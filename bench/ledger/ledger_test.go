package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/bench/ledger"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

var update = flag.Bool("update", false, "write what TestLedger measures to ledger.txt")

func TestMain(m *testing.M) {
	if os.Getenv(driverEnv) != "" {
		if err := runDriver(); err != nil {
			fmt.Fprintln(os.Stderr, "ledger driver:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	stack.Main(m)
}

// file is the committed ledger.
const file = "ledger.txt"

// TestLedger measures what one run of each shape costs and fails when a count rose
// above the committed ledger: a rise must be explained. A fall is logged, to be kept by
// updating the file. It is not parallel: the allocations it counts are the whole
// process's.
//
// Some paths race (a River worker and this gateway's wake claim one run; a waiter reads
// a run that has just finished, or is told first): a window may cost less than the run
// usually does, never more than its slowest path. So the file records what a run
// usually costs (each shape's most frequent counts over its windows, and the median
// allocations and WAL bytes), and the test compares the least of its windows with it:
// only a rise in every window, which a real cost makes, fails it.
func TestLedger(t *testing.T) {
	if *update && raceDetector {
		t.Fatal("-update needs a build without the race detector: its allocations differ by chance")
	}
	measured, typical := measure(t, shapes, nil)
	var b bytes.Buffer
	if *update {
		require.NoError(t, typical.Write(&b))
		require.NoError(t, os.WriteFile(file, b.Bytes(), 0o644))
		t.Logf("wrote %s:\n%s", file, b.String())
		return
	}
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	recorded, err := ledger.Parse(f)
	require.NoError(t, err)
	if raceDetector {
		t.Log("built with the race detector, whose allocations differ by chance: allocations are not compared (./test.sh runs this test without it)")
		for name, c := range measured.Costs {
			c.Allocs = recorded.Costs[name].Allocs
			measured.Costs[name] = c
		}
	}
	require.NoError(t, measured.Write(&b))
	rose := false
	for _, c := range ledger.Compare(recorded, measured) {
		if c.Rose() {
			t.Error(c)
			rose = true
		} else {
			t.Logf("%s (a window cheaper than the ledger's usual run: keep a fall with -update)", c)
		}
	}
	if rose {
		t.Logf("measured (the least of each count over %d windows):\n%s", windows, b.String())
		t.Log("if the change is meant, update the ledger in the same commit (go test ./bench/ledger -run '^TestLedger$' -update), and say in the commit's message why a count rose")
	}
}

// TestLedgerCatchesARise is the test of the test: a gateway that sends one statement
// more whenever a pool hands a connection out (a real statement, on the hot path) is
// measured as TestLedger measures, and the comparison with the committed ledger fails,
// naming the counts that rose.
func TestLedgerCatchesARise(t *testing.T) {
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	recorded, err := ledger.Parse(f)
	require.NoError(t, err)
	recorded.Shapes = []string{"steps3"}

	measured, _ := measure(t, recorded.Shapes, func(c *pgxpool.Config) {
		c.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
			_, err := conn.Exec(ctx, "SELECT 1")
			return err == nil, err
		}
	})
	rose := map[string]bool{}
	for _, c := range ledger.Compare(recorded, measured) {
		t.Log(c)
		if c.Rose() {
			rose[c.What] = true
		}
	}
	for _, what := range []string{"stmts", "roundtrips", "tx", "stmt SELECT"} {
		require.True(t, rose[what], "the ledger did not see %s rise", what)
	}
}

// windows is how many runs of each shape are measured. What the gateway does in the
// background (River's leader election, a fetch that finds nothing, a maintenance pass)
// is left out by name (backgroundWork).
const windows = 7

// measure runs each shape against a gateway of its own, whose database config hook
// may change, and returns what one run of each costs: the least of its windows (each
// count), and the typical one (the most frequent counts, the median allocations and WAL
// bytes).
func measure(t *testing.T, names []string, hook func(*pgxpool.Config)) (cheapest, usual ledger.Ledger) {
	ctx := t.Context()
	tracer := ledger.NewTracer(1 << 14)
	dbURL := pgtest.DBURL(t)
	// The maintenance passes are left out of the counts anyway (background); without
	// them, a shape whose window is long (a sleep waits for River's scheduler) is not
	// charged their allocations.
	s := stack.Start(t, stack.Options{DatabaseURL: dbURL, MaintainInterval: time.Hour, Database: func(c *pgxpool.Config) {
		c.ConnConfig.Tracer = tracer
		if hook != nil {
			hook(c)
		}
	}})
	admin, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(t.Context()) })
	_, err = admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	require.NoError(t, err)
	var version int
	require.NoError(t, admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int / 10000`).Scan(&version))

	d := startDriver(t, s.URL, s.Token, dbURL)
	for _, name := range names { // once each first: caches, prepared statements, connections
		d.run(t, name, func() {})
	}
	cheapest = ledger.Ledger{Postgres: version, Costs: map[string]ledger.Cost{}}
	usual = ledger.Ledger{Postgres: version, Costs: map[string]ledger.Cost{}}
	for _, name := range names {
		var best ledger.Cost
		var all []ledger.Cost
		for w := range windows {
			from, err := ledger.WALPosition(ctx, admin)
			require.NoError(t, err)
			tracer.Reset()
			// A collection during a window empties the pools (sync.Pool) that the window's
			// work would have drawn from: start each one just after a collection, so
			// that none comes in the middle of the next and every window pays the same.
			runtime.GC()
			allocs := heapAllocs()
			reqs := d.run(t, name, func() {
				require.Eventually(t, func() bool { return s.Invoker.Status().InFlight == 0 && tracer.Open() == 0 }, 10*time.Second, time.Millisecond)
				allocs = heapAllocs() - allocs
			})
			require.Eventually(t, func() bool { return s.Invoker.Status().InFlight == 0 && tracer.Open() == 0 }, 10*time.Second, time.Millisecond)
			stmts := tracer.Statements()
			to, err := ledger.WALFlushed(ctx, admin)
			require.NoError(t, err)
			wal, err := ledger.ReadWAL(ctx, admin, from, to, background.table)
			require.NoError(t, err)
			c := cost(reqs, stmts, wal, allocs)
			t.Logf("%s #%d: in %d out %d back %d stmts %d rt %d tx %d commits %d rows %d wal %d allocs %d", name, w,
				c.HTTPIn, c.HTTPOut, c.HTTPBack, c.Statements, c.RoundTrips, c.Transactions, c.Commits, c.Rows, c.WALBytes, c.Allocs)
			if testing.Verbose() {
				for _, st := range stmts {
					t.Logf("    %s rows=%d rt=%v tx=%v conn=%d", st.Name, st.Rows, st.RoundTrip, st.Tx, st.Conn)
				}
				for _, r := range wal.Records {
					t.Logf("    wal: %s", r)
				}
			}
			all = append(all, c)
			if w == 0 {
				best = c
				continue
			}
			best = least(best, c)
		}
		cheapest.Shapes = append(cheapest.Shapes, name)
		cheapest.Costs[name] = best
		usual.Shapes = append(usual.Shapes, name)
		usual.Costs[name] = typical(all)
	}
	return cheapest, usual
}

// typical returns the run of a shape that its windows cost most often (the same counts,
// and of several such, the cheapest), with the median allocations and WAL bytes of all.
func typical(all []ledger.Cost) ledger.Cost {
	key := func(c ledger.Cost) string {
		return fmt.Sprint(c.Statements, c.RoundTrips, c.Transactions, c.Commits, c.Rows, c.HTTPIn, c.HTTPOut, c.HTTPBack)
	}
	seen := map[string]int{}
	for _, c := range all {
		seen[key(c)]++
	}
	var out ledger.Cost
	most := 0
	for _, c := range all {
		if n := seen[key(c)]; n > most || (n == most && c.Statements < out.Statements) {
			out, most = c, n
		}
	}
	median := func(get func(ledger.Cost) int64) int64 {
		v := make([]int64, len(all))
		for i, c := range all {
			v[i] = get(c)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	out.Allocs = median(func(c ledger.Cost) int64 { return c.Allocs })
	out.WALBytes = median(func(c ledger.Cost) int64 { return c.WALBytes })
	return out
}

// backgroundWork is what the gateway does on its own, whatever the runs: it is left
// out of every count.
type backgroundWork struct {
	statements map[string]bool // by name, whatever they return
	idle       map[string]bool // by name, when they found nothing to do (no rows)
	tables     map[string]bool // transactions that write these are left out of the WAL
}

var background = backgroundWork{
	statements: map[string]bool{
		// River's leader election and maintenance (the leader's), and its producers'
		// reports.
		"LeaderAttemptElect": true, "LeaderAttemptReelect": true, "LeaderResign": true,
		"JobDeleteBefore": true, "JobGetStuck": true, "JobRescueMany": true, "QueueDeleteExpired": true,
		// stepgate's maintenance pass (invoker/internal/maintenance), each gateway's.
		"ActionUpcomingDeadlines": true, "RunsStranded": true, "RunsUpcomingWakes": true, "ScheduleOverdueTicks": true,
		"LeaseReapExpired": true, "LeaseRenew": true, "UsageFold": true, "FlowPrune": true, "FlowRefillHeldLines": true,
	},
	idle: map[string]bool{"JobGetAvailable": true, "JobSchedule": true},
	tables: map[string]bool{
		"public.river_leader": true, "public.river_queue": true, "public.river_client": true, "public.river_client_queue": true,
	},
}

func (b backgroundWork) table(name string) bool { return b.tables[name] }

func (b backgroundWork) statement(s ledger.Statement) bool {
	return b.statements[s.Name] || (b.idle[s.Name] && s.Rows == 0)
}

// transaction reports whether every statement of tx but its BEGIN and COMMIT is the
// gateway's own background work.
func (b backgroundWork) transaction(tx []ledger.Statement) bool {
	some := false
	for _, s := range tx {
		switch {
		case s.Name == "begin" || s.Name == "commit" || s.Name == "rollback":
		case !b.statement(s):
			return false
		default:
			some = true
		}
	}
	return some
}

// batched are River's statements that fetch or complete several jobs at once.
var batched = map[string]bool{"JobGetAvailable": true, "JobSetStateIfRunningMany": true}

// cost sums one run's counts.
func cost(reqs []ledger.Detail, stmts []ledger.Statement, wal ledger.WAL, allocs int64) ledger.Cost {
	c := ledger.Cost{Commits: wal.Commits, Rows: wal.RowsWritten(), WALBytes: wal.Bytes, Allocs: allocs}
	slices.SortFunc(reqs, func(a, b ledger.Detail) int { return strings.Compare(a.Kind+a.Name, b.Kind+b.Name) })
	for _, r := range reqs {
		switch r.Kind {
		case "in":
			c.HTTPIn += r.Count
		case "out":
			c.HTTPOut += r.Count
		case "back":
			c.HTTPBack += r.Count
		}
	}
	slices.SortFunc(reqs, func(a, b ledger.Detail) int {
		return cmpOr(strings.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), strings.Compare(a.Name, b.Name))
	})
	c.Details = append(c.Details, reqs...)
	names := map[string]int{}
	for _, tx := range ledger.Transactions(stmts) {
		if background.transaction(tx) {
			continue
		}
		// River fetches and completes jobs in batches, whose size depends on timing:
		// a job's share counts as if it had been fetched or completed alone.
		n := 1
		if len(tx) == 1 && batched[tx[0].Name] && tx[0].Rows > 1 {
			n = int(tx[0].Rows)
			if tx[0].Name == "JobSetStateIfRunningMany" {
				c.Commits += n - 1
			}
		}
		c.Transactions += n
		for _, s := range tx {
			c.Statements += n
			if s.RoundTrip {
				c.RoundTrips += n
			}
			names[s.Name] += n
		}
	}
	for _, n := range sortedKeys(names) {
		c.Details = append(c.Details, ledger.Detail{Kind: "stmt", Name: n, Count: names[n]})
	}
	for _, table := range wal.TableNames() {
		r := wal.Tables[table]
		if n := r.Written(); n > 0 {
			c.Details = append(c.Details, ledger.Detail{Kind: "rows", Name: table, Count: n})
		}
		if r.Locked > 0 {
			c.Details = append(c.Details, ledger.Detail{Kind: "lock", Name: table, Count: r.Locked})
		}
	}
	return c
}

func kindOrder(k string) string {
	return map[string]string{"in": "0", "out": "1", "back": "2"}[k] + k
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// least returns the cheaper of two runs of a shape: the one with fewer statements (then
// fewer rows, then fewer HTTP requests), with the fewer allocations and WAL bytes of the
// two.
func least(a, b ledger.Cost) ledger.Cost {
	key := func(c ledger.Cost) []int {
		return []int{c.Statements, c.RoundTrips, c.Transactions, c.Commits, c.Rows, c.HTTPIn + c.HTTPOut + c.HTTPBack}
	}
	out := a
	if slices.Compare(key(b), key(a)) < 0 {
		out = b
	}
	out.Allocs = min(a.Allocs, b.Allocs)
	out.WALBytes = min(a.WALBytes, b.WALBytes)
	return out
}

// heapAllocs returns the process's heap allocations so far, without allocating.
// runtime.ReadMemStats stops the world to count what every P has allocated, where
// runtime/metrics counts a P's allocations only when it refills a span.
var memStats runtime.MemStats

func heapAllocs() int64 {
	runtime.ReadMemStats(&memStats)
	return int64(memStats.Mallocs)
}

// driver is the driver process (see runDriver).
type driver struct {
	in  io.Writer
	out *bufio.Scanner
}

func startDriver(t *testing.T, gateway, token, dbURL string) *driver {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), driverEnv+"=1", envGateway+"="+gateway, envToken+"="+token, envDatabase+"="+dbURL)
	cmd.Stderr = testWriter{t}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	d := &driver{in: in, out: bufio.NewScanner(out)}
	d.out.Buffer(make([]byte, 1<<16), 1<<20)
	require.True(t, d.out.Scan(), "the driver did not start: %v", d.out.Err())
	require.Equal(t, "ready", d.out.Text())
	return d
}

// run runs shape once and returns its HTTP requests; settled runs when the gateway has
// nothing left to do for it but River jobs waiting for River's scheduler.
func (d *driver) run(t *testing.T, shape string, settled func()) []ledger.Detail {
	_, err := fmt.Fprintln(d.in, shape)
	require.NoError(t, err)
	require.True(t, d.out.Scan(), "the driver stopped: %v", d.out.Err())
	require.Equal(t, "settled", d.out.Text())
	settled()
	require.True(t, d.out.Scan(), "the driver stopped: %v", d.out.Err())
	var a driverAnswer
	require.NoError(t, json.Unmarshal(d.out.Bytes(), &a))
	require.Empty(t, a.Error, "run of %s", shape)
	return a.Requests
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestDocsShowTheLedger: the table in docs/internals.md is the ledger's.
func TestDocsShowTheLedger(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile("../../docs/internals.md")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(docs), "<!-- ledger:begin -->\n```\n")
	require.True(t, ok, "docs/internals.md has no ledger block")
	block, _, ok = strings.Cut(block, "```\n<!-- ledger:end -->")
	require.True(t, ok, "docs/internals.md's ledger block has no end")
	f, err := os.ReadFile(file)
	require.NoError(t, err)
	_, table, _ := strings.Cut(string(f), "\nshape ")
	table, _, _ = strings.Cut("shape "+table, "\n\n")
	require.Equal(t, table+"\n", block, "copy the table of %s into docs/internals.md", file)
}
