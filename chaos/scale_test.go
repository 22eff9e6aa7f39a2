package chaos_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scale-out measurement's knobs (make scale):
//
//	STEPGATE_SCALE_ROUNDS=N         rounds of (one gateway, two gateways), in alternation; unset: skip the test
//	STEPGATE_SCALE_FUNCTIONS=A,B    the functions (default tick,chain: 1 step, and bench's 10 steps)
//	STEPGATE_SCALE_CONCURRENCY=N    client goroutines in all, split over two bench processes (default 32)
//	STEPGATE_SCALE_CELL=D           how long each bench measures (default 10s, after 2s of warm-up)
//
// The test measures; it asserts no timing. It fails only when a bench fails, when both
// gateways did not both invoke runs in the two-gateway phases, or when a run was lost.

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux build that
// Go supports.
const clockTicks = 100

// TestScaleOut measures whether two gateways on one Postgres complete more runs per
// second than one. Each phase runs two `stepgate bench` processes at once (each with half
// the concurrency), both against gw1 with gw2 stopped, or one against each gateway; the
// phases alternate, the order flipping each round. For each phase it prints the runs per
// second of both benches together and the CPU that each process used (utime+stime from
// /proc, in cores: CPU seconds per second of wall clock): the gateways, Postgres (its
// postmaster and backends), the function app (this test process), the benches, and the
// whole machine. The ratio two/one per round, and its median, are printed, and the runs
// per CPU-second of the stack (gateways, Postgres, app and benches together): on a machine
// whose cores are all busy, a phase can go faster only by getting more CPU, and that
// figure tells whether a run cost more or less of it.
func TestScaleOut(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("STEPGATE_SCALE_ROUNDS"))
	if rounds <= 0 {
		t.Skip("scale: set STEPGATE_SCALE_ROUNDS (make scale) to measure one gateway against two")
	}
	if why := skipReason(); why != "" {
		t.Skip(why)
	}
	if why := noPostgresBinaries(); why != "" {
		t.Skip("scale: " + why + "; the measurement counts its own Postgres's CPU")
	}
	if gatewayErr != nil {
		t.Fatal(gatewayErr)
	}
	functions := splitComma(cmpEnv("STEPGATE_SCALE_FUNCTIONS", "tick,chain"))
	conc, err := strconv.Atoi(cmpEnv("STEPGATE_SCALE_CONCURRENCY", "32"))
	if err != nil || conc < 2 {
		t.Fatalf("STEPGATE_SCALE_CONCURRENCY: want an integer >= 2")
	}
	cell, err := time.ParseDuration(cmpEnv("STEPGATE_SCALE_CELL", "10s"))
	if err != nil || cell <= 0 {
		t.Fatalf("STEPGATE_SCALE_CELL: want a positive duration")
	}

	srv, url := ownPostgres(t)
	s := newScenario(t, fleetConfig{DatabaseURL: url})
	s.res.scenario = "ScaleOut"
	gw1, gw2 := s.f.gws[0], s.f.gws[1]
	t.Logf("scale: %d rounds of %v; %d client goroutines in 2 bench processes; %s per cell after 2s of warm-up; gateways with STEPGATE_DB_MAX_CONNS=12, race=%v",
		rounds, functions, conc, cell, raceEnabled)

	type phase struct {
		fn       string
		gateways int
		rps      float64
		errors   int
		cpu      map[string]float64 // cores, by process
		invs     map[string]int     // invocations by gateway
	}
	var phases []phase
	run := func(fn string, gateways int) {
		if gateways == 1 && gw2.up() {
			if _, _, err := gw2.terminate(time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if gateways == 2 && !gw2.up() {
			if err := gw2.start(s.ctx); err != nil {
				t.Fatal(err)
			}
		}
		targets := []*gateway{gw1, gw1}
		if gateways == 2 {
			targets = []*gateway{gw1, gw2}
		}
		procs := map[string]func() float64{
			"gw1":      func() float64 { return procCPU(gw1.pid()) },
			"gw2":      func() float64 { return procCPU(gw2.pid()) },
			"postgres": func() float64 { return treeCPU(srv.PID()) },
			"app":      func() float64 { return procCPU(os.Getpid()) },
			"machine":  machineCPU,
		}
		before := map[string]float64{}
		for name, f := range procs {
			before[name] = f()
		}
		invsBefore := len(s.a.rec.invocations())
		began := time.Now()
		var wg sync.WaitGroup
		reps := make([]benchJSON, len(targets))
		benchCPU := make([]float64, len(targets))
		errs := make([]error, len(targets))
		for i, g := range targets {
			wg.Go(func() { reps[i], benchCPU[i], errs[i] = s.bench(g, fn, conc/len(targets), cell) })
		}
		wg.Wait()
		wall := time.Since(began).Seconds()
		p := phase{fn: fn, gateways: gateways, cpu: map[string]float64{}, invs: countBy(s.a.rec.invocations()[invsBefore:], func(i *invocation) string { return i.gateway })}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("bench %d against %s: %v", i+1, targets[i].name, err)
			}
			for _, c := range reps[i].Cells {
				p.rps += c.RunsPerSecond
				p.errors += c.Errors
			}
		}
		for name, f := range procs {
			p.cpu[name] = (f() - before[name]) / wall
		}
		if gateways == 1 {
			p.cpu["gw2"] = 0
		}
		p.cpu["bench"] = (benchCPU[0] + benchCPU[1]) / wall
		phases = append(phases, p)
		t.Logf("%-6s %d gateway(s): %7.1f runs/s, %d errors; CPU in cores: gw1 %.2f gw2 %.2f postgres %.2f app %.2f bench %.2f, machine %.2f; invocations %s",
			fn, gateways, p.rps, p.errors, p.cpu["gw1"], p.cpu["gw2"], p.cpu["postgres"], p.cpu["app"], p.cpu["bench"], p.cpu["machine"], fmtCounts(p.invs))
		if p.errors > 0 {
			s.note("%s with %d gateway(s): %d bench errors", fn, gateways, p.errors)
		}
		if gateways == 2 && (p.invs["gw1"] == 0 || p.invs["gw2"] == 0) {
			t.Errorf("%s with two gateways: invocations by gateway %s; want both to invoke runs", fn, fmtCounts(p.invs))
		}
	}
	for r := range rounds {
		for _, fn := range functions {
			order := []int{1, 2}
			if r%2 == 1 {
				order = []int{2, 1}
			}
			for _, n := range order {
				run(fn, n)
			}
		}
	}

	// The summary: per function, the ratio of each round and the mean CPU per phase.
	for _, fn := range functions {
		var ratios []float64
		var ones, twos []phase
		for _, p := range phases {
			if p.fn != fn {
				continue
			}
			if p.gateways == 1 {
				ones = append(ones, p)
			} else {
				twos = append(twos, p)
			}
		}
		var rs []string
		for i := range min(len(ones), len(twos)) {
			ratios = append(ratios, twos[i].rps/ones[i].rps)
			rs = append(rs, fmt.Sprintf("%.2f", twos[i].rps/ones[i].rps))
		}
		mean := func(ps []phase, f func(phase) float64) float64 {
			var sum float64
			for _, p := range ps {
				sum += f(p)
			}
			return sum / float64(len(ps))
		}
		stack := func(p phase) float64 {
			return p.cpu["gw1"] + p.cpu["gw2"] + p.cpu["postgres"] + p.cpu["app"] + p.cpu["bench"]
		}
		line := func(ps []phase) string {
			return fmt.Sprintf("%7.1f runs/s, %.0f runs per CPU-second of the stack; CPU cores: stack %.2f (gateways %.2f, postgres %.2f, app %.2f, bench %.2f), machine %.2f of %d",
				mean(ps, func(p phase) float64 { return p.rps }),
				mean(ps, func(p phase) float64 { return p.rps / stack(p) }),
				mean(ps, stack),
				mean(ps, func(p phase) float64 { return p.cpu["gw1"] + p.cpu["gw2"] }),
				mean(ps, func(p phase) float64 { return p.cpu["postgres"] }),
				mean(ps, func(p phase) float64 { return p.cpu["app"] }),
				mean(ps, func(p phase) float64 { return p.cpu["bench"] }),
				mean(ps, func(p phase) float64 { return p.cpu["machine"] }), runtime.NumCPU())
		}
		s.note("%s: two gateways / one: %s per round, median %.2f", fn, strings.Join(rs, " "), median(ratios))
		s.note("%s: one gateway (mean of %d): %s", fn, len(ones), line(ones))
		s.note("%s: two gateways (mean of %d): %s", fn, len(twos), line(twos))
	}

	// No run lost: every run the benches started completed.
	var ids []string
	for _, fn := range functions {
		runs, err := s.f.runsOf(s.ctx, fn)
		if err != nil {
			t.Fatal(err)
		}
		for id := range runs {
			ids = append(ids, id)
		}
	}
	s.settle(ids, stuckAfter, completedWithoutFailure)
}

// benchJSON is what this test reads of `stepgate bench --json`.
type benchJSON struct {
	Cells []struct {
		Runs          int     `json:"runs"`
		Errors        int     `json:"errors"`
		RunsPerSecond float64 `json:"runs_per_second"`
	} `json:"cells"`
}

// bench runs `stepgate bench --json` against g with runs of fn at concurrency conc for
// d (after 2s of warm-up), and returns its report and the CPU seconds it used.
func (s *scenario) bench(g *gateway, fn string, conc int, d time.Duration) (benchJSON, float64, error) {
	var rep benchJSON
	cmd := exec.CommandContext(s.ctx, gatewayBin, "bench", "--json", "--url", g.url, "--functions", fn,
		"--concurrency", strconv.Itoa(conc), "--duration", d.String(), "--warmup", "2s", "--sleep", "0")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "STEPGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "STEPGATE_TOKEN="+s.f.token)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return rep, 0, fmt.Errorf("%w\n%s", err, errOut.String())
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return rep, cpu, fmt.Errorf("bench's JSON: %w\n%s", err, out.String())
	}
	return rep, cpu, nil
}

// procCPU returns the CPU seconds (user + system) process pid has used, from
// /proc/<pid>/stat; 0 when pid is 0 or gone. With children, it adds the CPU of its
// children that it waited for.
func procCPU(pid int) float64 { return statCPU(pid, false) }

func statCPU(pid int, children bool) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces), from field 3 (state) on.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0
	}
	n := 2 // utime, stime: fields 14, 15
	if children {
		n = 4 // and cutime, cstime: fields 16, 17
	}
	var ticks float64
	for _, s := range f[11 : 11+n] {
		v, _ := strconv.ParseFloat(s, 64)
		ticks += v
	}
	return ticks / clockTicks
}

// treeCPU returns the CPU seconds of process pid, of its live children and of the
// children it waited for: Postgres's postmaster and its backends.
func treeCPU(pid int) float64 {
	total := statCPU(pid, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			total += procCPU(child)
		}
	}
	return total
}

// machineCPU returns the CPU seconds that all the machine's cores spent busy (not idle,
// not waiting for I/O), from /proc/stat.
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy float64
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		if i != 3 && i != 4 && i < 8 { // not idle, iowait; guest time is in user already
			busy += v
		}
	}
	return busy / clockTicks
}

func cmpEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func splitComma(s string) []string {
	return slices.DeleteFunc(strings.Split(s, ","), func(x string) bool { return strings.TrimSpace(x) == "" })
}
