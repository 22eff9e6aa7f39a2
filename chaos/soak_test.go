package chaos_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The soak's knobs, from the environment (make soak DURATION=30m sets the first):
//
//	STEPGATE_SOAK_DURATION=D    how long the load runs (default 20s: the short soak of ./test.sh)
//	STEPGATE_SOAK_INTERVAL=D    how often it samples (default D/40, within 2s..30s)
//	STEPGATE_SOAK_RATE=N        runs started per second (default 10; 5 in the short soak)
//	STEPGATE_SOAK_KILL_EVERY=D  kill -9 gw2 this often and restart it (default 5m; the short
//	                            soak kills it once, halfway; 0: never)
//
// The growth rule is enforced only when the soak lasts at least soakEnforceAfter: a short
// soak cannot tell warming up from growing, so it prints the verdicts and checks only that
// no run is lost.
const soakEnforceAfter = 3 * time.Minute

type soakConfig struct {
	duration, interval, killEvery time.Duration
	rate                          float64
	enforce                       bool
}

func soakSettings(t *testing.T) soakConfig {
	t.Helper()
	dur := func(name string, def time.Duration) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: not a duration (e.g. 30m)", name, v)
		}
		return d
	}
	c := soakConfig{duration: dur("STEPGATE_SOAK_DURATION", 20*time.Second)}
	if c.duration < 10*time.Second {
		t.Fatalf("STEPGATE_SOAK_DURATION=%s: at least 10s", c.duration)
	}
	short := os.Getenv("STEPGATE_SOAK_DURATION") == ""
	c.enforce = c.duration >= soakEnforceAfter
	c.interval = dur("STEPGATE_SOAK_INTERVAL", min(max(c.duration/40, 2*time.Second), 30*time.Second))
	c.killEvery = dur("STEPGATE_SOAK_KILL_EVERY", 5*time.Minute)
	if short && os.Getenv("STEPGATE_SOAK_KILL_EVERY") == "" {
		c.killEvery = c.duration / 2
	}
	c.rate = 10
	if short {
		c.rate = 5
	}
	if v := os.Getenv("STEPGATE_SOAK_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 200 {
			t.Fatalf("STEPGATE_SOAK_RATE=%q: runs per second, above 0 and at most 200", v)
		}
		c.rate = r
	}
	return c
}

// TestSoak runs steady mixed load through two gateways for STEPGATE_SOAK_DURATION (make
// soak), kills one of them with SIGKILL every STEPGATE_SOAK_KILL_EVERY and restarts it,
// and samples, every interval: each gateway's resident memory, heap goal, goroutines, open
// files and pool connections (from its /metrics), the database's connections
// (pg_stat_activity) and size, the runs not yet ended, and the runs finished in the
// interval with the latency (created to finished) of the chain runs among them. It prints
// a row per sample, then each series' verdict (see levelsOff), and fails when, in a soak
// of soakEnforceAfter or more, a series of a gateway that was never killed, of the
// database or of the run latency grows without levelling off. Like every scenario, it
// then checks that no run was lost: every run completes with no failed attempt, its
// journal is whole, no journaled step ran again.
//
// The load, per 10 runs: 6 of chain (3 steps of 20ms), 2 of nap (a step, a durable sleep
// of 500ms, a step) and 2 of await (waits for an event, which the load sends through the
// API until the run took it, then a step).
func TestSoak(t *testing.T) {
	if why := skipReason(); why != "" {
		t.Skip(why)
	}
	if gatewayErr != nil {
		t.Fatal(gatewayErr)
	}
	c := soakSettings(t)
	s := newScenario(t, fleetConfig{Metrics: true})
	s.res.scenario = "Soak"
	t.Logf("soak: %s of %.0f runs/s, a sample every %s, kill -9 of gw2 every %s (0: never); growth rule enforced: %v (from %s)",
		c.duration, c.rate, c.interval, c.killEvery, c.enforce, soakEnforceAfter)

	l := s.startMixedLoad(time.Duration(float64(time.Second)/c.rate), soakPick, func(ctx context.Context, id string, input any) error {
		if in, ok := input.(awaitInput); ok {
			return s.pay(ctx, id, in.Key)
		}
		return nil
	})
	smp := &soakSampler{s: s, began: time.Now(), last: time.Now()}
	t.Log(smp.header())
	sampled := make(chan struct{})
	sctx, stopSampling := context.WithCancel(s.ctx)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(c.interval)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				smp.sample(sctx)
			}
		}
	}()
	// The sampler logs; it must be done before the test is (a t.Fatal below included).
	defer func() {
		stopSampling()
		<-sampled
	}()

	// The kills: gw2 only, so that gw1 lives the whole soak and its series tell whether
	// a process's memory levels off.
	end := smp.began.Add(c.duration)
	victim := s.f.gateway("gw2")
	var ks []interruption
	for c.killEvery > 0 {
		next := smp.began.Add(time.Duration(len(ks)+1) * c.killEvery)
		if !next.Before(end.Add(-c.killEvery / 4)) {
			break
		}
		pause(s.ctx, time.Until(next))
		ks = append(ks, interruption{gateways: []string{victim.name}, at: victim.kill()})
		smp.mark(fmt.Sprintf("kill -9 %s", victim.name))
		pause(s.ctx, time.Second)
		if err := victim.start(s.ctx); err != nil {
			t.Fatal(err)
		}
	}
	pause(s.ctx, time.Until(end))
	ids, err := l.stop()
	stopSampling()
	<-sampled
	if err != nil {
		t.Errorf("starting runs or sending their events: %v", err)
	}
	s.note("%d runs started in %s", len(ids), c.duration)

	checked := []string{"gw1"}
	if len(ks) == 0 {
		checked = append(checked, "gw2")
	}
	if bad := smp.report(t, checked, c.enforce); len(bad) > 0 {
		msg := fmt.Sprintf("growth that does not level off: %s", strings.Join(bad, "; "))
		if c.enforce {
			t.Error(msg)
		} else {
			s.note("%s (not enforced: the soak is shorter than %s)", msg, soakEnforceAfter)
		}
	}

	runs := s.settle(ids, stuckAfter, completedWithoutFailure)
	s.checkNoFailedAttempts(ids)
	s.reportRecoveries(ks, runs, recoveryBound)
}

// soakPick is the soak's mix: of every 10 runs, 6 chain, 2 nap, 2 await.
func soakPick(i int) (string, any) {
	switch i % 10 {
	case 3, 8:
		return fnNap, struct{}{}
	case 5, 9:
		return fnAwait, awaitInput{Key: rand.Text()}
	default:
		return fnChain, shortRun
	}
}

// pay sends paidEvent with data.key = key through the running gateways until run id took
// one (its journal holds the wait's entry) or ended, for up to a minute. An event sent
// before the run's invocation began resumes nothing (see docs/events.md), so it sends
// another, with another id, every 200ms.
func (s *scenario) pay(ctx context.Context, id, key string) error {
	deadline := time.Now().Add(time.Minute)
	for try := 0; time.Now().Before(deadline); try++ {
		var took bool
		err := s.f.db.QueryRow(ctx, `SELECT status IN ('completed', 'failed', 'cancelled')
			OR EXISTS (SELECT 1 FROM stepgate.journal_entry WHERE run_id = $1 AND name = 'paid')
			FROM stepgate.run WHERE id = $1`, id).Scan(&took)
		if err == nil && took {
			return nil
		}
		if up := s.f.running(); len(up) > 0 {
			event := map[string]any{"name": paidEvent, "id": key + "-" + strconv.Itoa(try), "data": awaitInput{Key: key}}
			_, _, _ = s.f.call(ctx, up[try%len(up)], http.MethodPost, "/v1/events", event, nil) // retried
		}
		pause(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("run %s of %s took no %s event within a minute", id, fnAwait, paidEvent)
}

// --- sampling --------------------------------------------------------------------------

// soakSample is one sample of the soak. NaN: not measured (a gateway down, no run finished).
type soakSample struct {
	at    time.Duration // since the soak began
	gws   map[string]gatewaySample
	db    map[string]float64 // series of the database and the runs, by name
	event string             // what happened since the previous sample
}

// gatewaySample is one gateway's series, by name.
type gatewaySample map[string]float64

// soakSeries are the series of a sample, in the order printed, with their unit and the
// tolerance of the growth rule (see levelsOff); enforced says whether the rule fails the
// soak (latency is noisier than the rest on a shared machine, but a soak is where a
// slowly growing table or index shows, so it is enforced too, with a wide tolerance).
var soakSeries = []struct {
	name, gateway, unit string // gateway: "" for the database's
	rel, abs            float64
	enforced            bool
}{
	{"rss", "*", "MiB", 0.10, 16, true},
	{"heap_goal", "*", "MiB", 0.10, 8, true},
	{"goroutines", "*", "", 0.20, 25, true},
	{"open_fds", "*", "", 0.20, 16, true},
	{"pool_conns", "*", "", 0.20, 4, false}, // bounded by the pool's max
	{"db_conns", "", "", 0.20, 4, true},
	{"db_size", "", "MiB", 0, 0, false}, // grows by design: retention keeps runs for days
	{"open_runs", "", "", 0.50, 25, true},
	{"done_per_s", "", "", 0, 0, false},
	{"chain_p50", "", "ms", 0.50, 25, true},
	{"chain_p99", "", "ms", 1.00, 100, true},
}

type soakSampler struct {
	s      *scenario
	began  time.Time
	mu     sync.Mutex
	last   time.Time
	event  string
	series []soakSample
}

// mark notes an event for the next sample's row.
func (m *soakSampler) mark(event string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.event = strings.TrimPrefix(m.event+", "+event, ", ")
}

func (m *soakSampler) sample(ctx context.Context) {
	now := time.Now()
	smp := soakSample{at: now.Sub(m.began).Round(time.Second), gws: map[string]gatewaySample{}, db: map[string]float64{}}
	for _, g := range m.s.f.gws {
		smp.gws[g.name] = scrape(ctx, g)
	}
	db := m.s.f.db
	q := func(name, sql string, scale float64, args ...any) {
		var v *float64
		if err := db.QueryRow(ctx, sql, args...).Scan(&v); err != nil || v == nil {
			smp.db[name] = math.NaN()
			return
		}
		smp.db[name] = *v * scale
	}
	m.mu.Lock()
	from := m.last
	m.last = now
	smp.event, m.event = m.event, ""
	m.mu.Unlock()
	q("db_conns", `SELECT count(*)::float8 FROM pg_stat_activity WHERE datname = current_database()`, 1)
	q("db_size", `SELECT pg_database_size(current_database())::float8`, 1.0/(1<<20))
	q("open_runs", `SELECT count(*)::float8 FROM stepgate.run WHERE status NOT IN ('completed', 'failed', 'cancelled')`, 1)
	q("done_per_s", `SELECT count(*)::float8 FROM stepgate.run WHERE finished_at >= $1 AND finished_at < $2`, 1/now.Sub(from).Seconds(), from, now)
	for name, p := range map[string]float64{"chain_p50": 0.5, "chain_p99": 0.99} {
		q(name, `SELECT percentile_cont($3::float8) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at))::float8
			FROM stepgate.run WHERE function = $4 AND finished_at >= $1 AND finished_at < $2`, 1000, from, now, p, fnChain)
	}
	if ctx.Err() != nil {
		return // cut short by the soak's end
	}
	m.mu.Lock()
	m.series = append(m.series, smp)
	m.mu.Unlock()
	m.s.t.Log(m.row(smp))
}

// scrape reads a gateway's series from its metrics listener; all NaN when it is down.
func scrape(ctx context.Context, g *gateway) gatewaySample {
	out := gatewaySample{}
	for _, s := range soakSeries {
		if s.gateway != "" {
			out[s.name] = math.NaN()
		}
	}
	if !g.up() {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.metricsURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out
	}
	sum := func(name string) float64 {
		f, ok := fams[name]
		if !ok {
			return math.NaN()
		}
		var v float64
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				v += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				v += m.GetUntyped().GetValue()
			}
		}
		return v
	}
	out["rss"] = sum("process_resident_memory_bytes") / (1 << 20)
	out["heap_goal"] = sum("go_memstats_next_gc_bytes") / (1 << 20)
	out["goroutines"] = sum("go_goroutines")
	out["open_fds"] = sum("process_open_fds")
	out["pool_conns"] = sum("stepgate_db_pool_total_conns")
	return out
}

// row formats a sample as one line of the table (see header).
func (m *soakSampler) row(smp soakSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7s", fmtSeconds(smp.at))
	for _, g := range m.s.f.gws {
		b.WriteString(" |    ")
		for _, s := range soakSeries {
			if s.gateway != "" {
				fmt.Fprintf(&b, " %6s", fmtValue(smp.gws[g.name][s.name]))
			}
		}
	}
	b.WriteString(" |")
	for _, s := range soakSeries {
		if s.gateway == "" {
			fmt.Fprintf(&b, " %6s", fmtValue(smp.db[s.name]))
		}
	}
	if smp.event != "" {
		b.WriteString("  " + smp.event)
	}
	return b.String()
}

// header is the table's header: per gateway, then the database's and the runs' series.
func (m *soakSampler) header() string {
	var b strings.Builder
	b.WriteString("      t")
	for _, g := range m.s.f.gws {
		fmt.Fprintf(&b, " | %-4s", g.name+":")
		for _, s := range soakSeries {
			if s.gateway != "" {
				fmt.Fprintf(&b, " %6s", abbrev(s.name))
			}
		}
	}
	b.WriteString(" |")
	for _, s := range soakSeries {
		if s.gateway == "" {
			fmt.Fprintf(&b, " %6s", abbrev(s.name))
		}
	}
	return b.String()
}

// abbrev shortens a series name to a column's 6 characters.
func abbrev(name string) string {
	r := strings.NewReplacer("heap_goal", "heap", "goroutines", "gor", "open_fds", "fds", "pool_conns", "pool",
		"db_conns", "dbconn", "db_size", "dbMiB", "open_runs", "open", "done_per_s", "done/s", "chain_", "")
	name = r.Replace(name)
	return name[:min(len(name), 6)]
}

func fmtSeconds(d time.Duration) string {
	if d >= time.Minute {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

func fmtValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// report logs the table's header and each series' verdict, and returns the enforced
// series, of the database and of the gateways named in checked, that grew.
func (m *soakSampler) report(t *testing.T, checked []string, enforce bool) (grew []string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("columns: %s (per gateway: rss and heap goal in MiB, goroutines, open files, pool connections; then the database's connections and size in MiB, the runs not ended, runs finished per second, and chain's run latency p50 and p99 in ms over the interval)", m.header())
	t.Logf("growth rule: the median of the last third of the samples against the middle third's (the first third is warm-up); a series levels off when last - middle <= max(abs, rel × middle)")
	var lines []string
	verdict := func(label string, xs []float64, rel, abs float64, judged bool) {
		g := levelsOff(xs, rel, abs)
		v := "-"
		switch {
		case !judged:
		case g.tooFew:
			v = "too few samples"
		case g.ok:
			v = "levels off"
		default:
			v = "GROWS"
			grew = append(grew, fmt.Sprintf("%s %s -> %s (allowed +%s)", label, fmtValue(g.middle), fmtValue(g.last), fmtValue(g.allowed)))
		}
		lines = append(lines, fmt.Sprintf("  %-22s first %8s  middle %8s  last %8s  %s", label, fmtValue(g.first), fmtValue(g.middle), fmtValue(g.last), v))
	}
	for _, s := range soakSeries {
		if s.gateway == "" {
			xs := make([]float64, len(m.series))
			for i, smp := range m.series {
				xs[i] = smp.db[s.name]
			}
			verdict(s.name, xs, s.rel, s.abs, s.enforced)
			continue
		}
		for _, g := range m.s.f.gws {
			xs := make([]float64, len(m.series))
			for i, smp := range m.series {
				xs[i] = smp.gws[g.name][s.name]
			}
			verdict(g.name+"."+s.name, xs, s.rel, s.abs, s.enforced && slices.Contains(checked, g.name))
		}
	}
	t.Logf("medians of each third of %d samples (gateways killed during the soak are not judged):\n%s", len(m.series), strings.Join(lines, "\n"))
	return grew
}

// growth is levelsOff's verdict on a series.
type growth struct {
	first, middle, last float64 // the medians of each third
	allowed             float64 // how much last may exceed middle
	ok, tooFew          bool
}

// levelsOff judges whether a series of samples levels off. It splits them into thirds
// and ignores the first (warm-up: pools filling, the heap growing to its working set);
// the series levels off when the median of the last third exceeds the median of the
// middle third by at most max(abs, rel × middle). Medians, not maxima, so that a GC cycle
// or a burst of connections in one sample does not decide; a series that grows steadily
// by G over the soak shows last - middle = G/3. NaN samples (a gateway down, an interval
// with no finished run) are left out; with fewer than 2 samples in a third it cannot
// tell and says so (tooFew, ok).
func levelsOff(xs []float64, rel, abs float64) growth {
	n := len(xs)
	third := func(i int) []float64 {
		var out []float64
		for _, x := range xs[i*n/3 : (i+1)*n/3] {
			if !math.IsNaN(x) {
				out = append(out, x)
			}
		}
		return out
	}
	parts := [3][]float64{third(0), third(1), third(2)}
	g := growth{first: median(parts[0]), middle: median(parts[1]), last: median(parts[2])}
	if len(parts[1]) < 2 || len(parts[2]) < 2 {
		g.ok, g.tooFew = true, true
		return g
	}
	g.allowed = max(abs, rel*g.middle)
	g.ok = g.last-g.middle <= g.allowed
	return g
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
