package chaos_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

// hangBound is the gateways' STEPGATE_DATABASE_TIMEOUT in the hang scenarios: shorter
// than its default (10s), so that the scenarios are short, and so that an answer within
// it shows the setting at work.
const hangBound = 3 * time.Second

// testPrimaryHang stops Postgres (the postmaster and every backend: SIGSTOP of its
// process group) under load, then lets it go on (SIGCONT): a primary that hangs
// instead of dying, as a machine stalled by its storage, or a VM paused.
func testPrimaryHang(t *testing.T) { testHang(t, false) }

// testLinkCut puts a TCP proxy between the gateways and Postgres and makes it stop
// forwarding under load (a black hole: connections stay open, no byte passes, new ones
// connect and get nothing), then forward again, the connections that were open at the
// cut reset, none of their held bytes delivered: the network between them cut for
// longer than TCP_USER_TIMEOUT, whose connections the kernels dropped, then healed. So
// unlike a stopped Postgres, which runs the statements in its sockets when it resumes
// (the lease renewals sent last among them), nothing sent during the cut arrives.
func testLinkCut(t *testing.T) { testHang(t, true) }

// testHang runs two gateways on a Postgres of its own, over TCP (through a proxy when
// link), under the failover scenario's load (chains, durable sleeps, waits for events,
// messages, a start every 100ms; 200ms in the short suite), with
// STEPGATE_DATABASE_TIMEOUT=hangBound. It makes the
// database hang, without an error, for longer than the lease TTL (so that every lease
// has lapsed by the database clock when it is back), then lets it go on. Checked:
//
//   - meanwhile, every API request (starts and reads, sent to both gateways every 100ms)
//     is answered, 503 with Retry-After (or 2xx), within the bound plus a margin for a
//     loaded machine: none waits for the database; none is a 500;
//   - no gateway exits; no lease is reaped from an invocation still running (no run
//     invoked again while its invocation in flight at the hang had not ended): long
//     runs in flight at the hang, whose invocations outlive it, are neither recovered
//     nor failed;
//   - afterwards, every start the API acknowledged exists, every checkpoint, event and
//     message acknowledged is stored, no (run, seq) twice, no gap, every run completes.
//
// Measured: the longest API request during the hang, and the time from the resume to
// the first start acknowledged and the first run completed.
func testHang(t *testing.T, link bool) {
	srv, direct := ownTCPPostgres(t)
	url, what := direct, "SIGSTOP of postgres"
	var proxy *linkProxy
	if link {
		proxy = newLinkProxy(t, srv.HostPort())
		url, what = "postgres://postgres@"+proxy.addr()+"/chaos?sslmode=disable", "the link cut"
	}
	s := newScenario(t, fleetConfig{DatabaseURL: url, Env: []string{"STEPGATE_DATABASE_TIMEOUT=" + hangBound.String()}})
	r := newRand(t)
	hangFor := size(6*time.Second, 20*time.Second) // past the lease TTL, 5s
	loadFor := size(4*time.Second, 10*time.Second)

	sent := &sentRecord{}
	l := s.startMixedLoad(size(200*time.Millisecond, 100*time.Millisecond), func(i int) (string, any) {
		switch i % 10 {
		case 0:
			return fnChain, midRun
		case 3:
			return fnNap, struct{}{}
		case 5, 8:
			return fnAwait, awaitInput{Key: rand.Text()}
		}
		return fnChain, shortRun
	}, func(ctx context.Context, id string, input any) error {
		switch in := input.(type) {
		case awaitInput:
			return s.payRecorded(ctx, id, in.Key, sent)
		case chainInput:
			if in == midRun {
				return s.messageRecorded(ctx, id, sent)
			}
		}
		return nil
	})
	pause(s.ctx, loadFor/2+between(r, 0, loadFor/2))
	// Long runs whose invocations outlive the hang (6s of steps, a timeout of 60s), in
	// flight when it comes: their leases lapse by the database clock while they wait
	// for their checkpoints, and must not be reaped from them when it ends.
	patient, err := s.f.startMany(s.ctx, size(2, 6), 6, fnPatient, func(int) any { return longRun })
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(s.ctx, 30*time.Second, "every long run makes progress", func() (bool, error) {
		return s.progressed(patient, s.began)
	}); err != nil {
		t.Fatal(err)
	}
	probe := s.probeAPI()

	hung := time.Now()
	if link {
		proxy.cut()
	} else if err := signalServer(srv, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pause(s.ctx, hangFor)
	resumed := time.Now()
	if link {
		proxy.heal(true)
	} else if err := signalServer(srv, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.note("%s at +%s for %s", what, hung.Sub(s.began).Round(100*time.Millisecond), resumed.Sub(hung).Round(10*time.Millisecond))

	pause(s.ctx, loadFor/2)
	ids, err := l.stop()
	if err != nil {
		t.Errorf("starting runs: %v", err)
	}
	if err := waitFor(s.ctx, stuckAfter, "a start acknowledged after the resume", func() (bool, error) {
		return !probe.firstStart(resumed).IsZero(), nil
	}); err != nil {
		t.Error(err)
	}
	answers := probe.stop()
	for _, a := range answers {
		if a.runID != "" {
			ids = append(ids, a.runID)
		}
	}

	runs := s.settle(append(ids, patient...), stuckAfter, completed)
	// The long runs waited out the hang in their one invocation: none failed, none was
	// recovered (invoked again).
	s.checkNoFailedAttempts(patient)
	var recovered []string
	for _, id := range patient {
		if run := runs[id]; run != nil && (run.FailedInvocations > 0 || run.Invocation > 1) {
			recovered = append(recovered, run.String())
		}
	}
	if len(recovered) > 0 {
		t.Errorf("%d of the %d long runs in flight at the hang were invoked more than once, e.g. %s", len(recovered), len(patient), recovered[0])
	}
	for _, g := range s.f.gws {
		if !g.up() {
			t.Errorf("%s exited during the hang", g.name)
		}
	}
	var missing []string
	for _, id := range ids {
		if runs[id] == nil {
			missing = append(missing, id)
		}
	}
	s.note("acknowledged starts: %d, lost: %d; checkpoints acknowledged: %d, lost: %d; duplicate entries: %d; checkpoints refused: %s",
		len(ids), len(missing), len(s.a.rec.acked()), s.res.missingAcks, s.res.duplicates, s.refusals())
	if len(missing) > 0 {
		t.Errorf("%d starts the API acknowledged are not in the database, e.g. %s", len(missing), missing[0])
	}
	s.checkSent(sent)

	// The API while the database hung: answered within the bound, 503 with Retry-After.
	during := map[string]int{}
	var longest time.Duration
	var late, fivehundreds, without, unavailable int
	for _, a := range answers {
		if a.at.Before(hung) || a.at.After(resumed) {
			continue
		}
		during[a.kind+" "+a.what()]++
		longest = max(longest, a.took)
		switch {
		case a.status == 0 || a.took > hangBound+5*time.Second:
			late++
		case a.status == http.StatusInternalServerError:
			fivehundreds++
		case a.status == http.StatusServiceUnavailable && a.retryAfter == "":
			without++
		case a.status == http.StatusServiceUnavailable:
			unavailable++
		}
	}
	s.note("API answers while the database hung: %s; the longest took %s (STEPGATE_DATABASE_TIMEOUT %s)", fmtCounts(during), fmtDur(longest), hangBound)
	if late > 0 {
		t.Errorf("%d API requests sent while the database hung were not answered within %s (the bound, %s, and a margin of 5s)", late, hangBound+5*time.Second, hangBound)
	}
	if fivehundreds > 0 {
		t.Errorf("the API answered 500 %d times while the database hung; want 503 with Retry-After", fivehundreds)
	}
	if without > 0 {
		t.Errorf("the API answered 503 without Retry-After %d times", without)
	}
	if unavailable == 0 {
		t.Errorf("the API never answered 503 while the database hung (answers: %s)", fmtCounts(during))
	}

	// No lease reaped from an invocation still running: every lease lapsed by the
	// database clock during the hang, and their gateways renew them once it is back.
	var reaped []string
	for _, inv := range s.inFlight(interruption{gateways: []string{"gw1", "gw2"}, at: hung}, 0) {
		end, _ := inv.ended()
		if next := s.nextInvocation(inv.runID, hung); next != nil && (end.IsZero() || next.start.Before(end)) {
			reaped = append(reaped, fmt.Sprintf("run %s: invoked again by %s while its invocation %d ran", inv.runID, next.gateway, inv.invocation))
		}
	}
	if len(reaped) > 0 {
		t.Errorf("%d leases were reaped from invocations still running, e.g. %s", len(reaped), reaped[0])
	}

	var firstDone time.Time
	for _, run := range runs {
		if run.FinishedAt != nil && run.FinishedAt.After(resumed) && (firstDone.IsZero() || run.FinishedAt.Before(firstDone)) {
			firstDone = *run.FinishedAt
		}
	}
	since := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return fmtDur(at.Sub(resumed))
	}
	s.note("from the resume: first start acknowledged %s, first run completed %s", since(probe.firstStart(resumed)), since(firstDone))
	if firstDone.IsZero() {
		t.Errorf("no run completed after the resume")
	}
}

// ownTCPPostgres starts a Postgres of the test's own listening on a loopback port, and
// returns it with the superuser URL, over TCP, of a new database on it (the gateways
// migrate it).
func ownTCPPostgres(t *testing.T) (*pgserver.Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sg-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Dir: dir, Port: freePort(t)})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = signalServer(srv, syscall.SIGCONT) // a stopped server cannot stop
		if err := srv.Stop(); err != nil {
			t.Logf("stop postgres: %v", err)
		}
		if t.Failed() {
			t.Logf("postgres log kept: %s", srv.LogPath())
			return
		}
		os.RemoveAll(dir)
	})
	conn, err := pgx.Connect(t.Context(), srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	if _, err := conn.Exec(t.Context(), `CREATE DATABASE chaos`); err != nil {
		t.Fatal(err)
	}
	return srv, "postgres://postgres@" + srv.HostPort() + "/chaos?sslmode=disable"
}

// signalServer sends sig to the server's postmaster and to every process it started
// (its backends and auxiliary processes, each in a session of its own, so found by
// their parent in /proc): SIGSTOP stops them, the postmaster first (it forks no more),
// SIGCONT lets them go on.
func signalServer(srv *pgserver.Server, sig syscall.Signal) error {
	pid := srv.PID()
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s to postgres (pid %d): %w", sig, pid, err)
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // exited
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(stat)))
		if err := syscall.Kill(child, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %s to postgres' process %d: %w", sig, child, err)
		}
	}
	return nil
}

// linkProxy forwards TCP connections to a target until cut: then it forwards nothing,
// either way, and connects new connections to nothing, keeping every connection open (a
// black hole), until healed, when it forwards what it held and goes on, or first closes
// the connections open at the cut, forwarding nothing of theirs.
type linkProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   chan struct{} // closed while the link forwards
	conns  map[net.Conn]struct{}
	atCut  []net.Conn // the connections open at the cut
	closed bool
	wg     sync.WaitGroup
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

// gate returns a channel that is closed while the link forwards.
func (p *linkProxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *linkProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = make(chan struct{})
	p.atCut = p.atCut[:0]
	for c := range p.conns {
		p.atCut = append(p.atCut, c)
	}
}

// heal forwards again; reset first closes the connections open at the cut (each pipe
// holding a chunk of theirs then fails to write it).
func (p *linkProxy) heal(reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if reset {
		for _, c := range p.atCut {
			c.Close()
			delete(p.conns, c)
		}
	}
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// track adds c to the connections that close closes, or closes it when the proxy is
// closed already.
func (p *linkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *linkProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	select {
	case <-p.open:
	default:
		close(p.open)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *linkProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// forward connects client to the target once the link forwards, then copies each way,
// each chunk only while the link forwards, until either side ends.
func (p *linkProxy) forward(client net.Conn) {
	defer client.Close()
	<-p.gate()
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		return
	}
	defer server.Close()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				<-p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() { pipe(server, client) })
	wg.Go(func() { pipe(client, server) })
	wg.Wait()
}

// apiProbe sends API requests to every gateway, each in turn a start (a fresh
// Idempotency-Key, no retry) and a read of a page of runs, one after the other with
// 100ms between them, and records each answer and how long it took.
type apiProbe struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	answers []probeAnswer
}

type probeAnswer struct {
	apiAnswer
	kind  string // "start" or "read"
	took  time.Duration
	runID string // of a start acknowledged
}

func (s *scenario) probeAPI() *apiProbe {
	ctx, cancel := context.WithCancel(s.ctx)
	p := &apiProbe{cancel: cancel}
	for _, g := range s.f.gws {
		p.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				a := probeAnswer{apiAnswer: apiAnswer{at: time.Now(), gateway: g.name}, kind: "read"}
				var resp *http.Response
				var b []byte
				var err error
				if i%2 == 0 {
					a.kind = "start"
					resp, b, err = s.f.call(ctx, g, http.MethodPost, "/v1/functions/"+fnChain+"/runs", shortRun,
						http.Header{"Idempotency-Key": {rand.Text()}})
				} else {
					resp, _, err = s.f.call(ctx, g, http.MethodGet, "/v1/runs?limit=1", nil, nil)
				}
				a.took = time.Since(a.at)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
					if a.kind == "start" && resp.StatusCode/100 == 2 {
						var run struct {
							ID string `json:"id"`
						}
						if json.Unmarshal(b, &run) == nil {
							a.runID = run.ID
						}
					}
				}
				p.mu.Lock()
				p.answers = append(p.answers, a)
				p.mu.Unlock()
				pause(ctx, 100*time.Millisecond)
			}
		})
	}
	return p
}

// firstStart returns when the first start sent after since was acknowledged, or the
// zero time.
func (p *apiProbe) firstStart(since time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first time.Time
	for _, a := range p.answers {
		if done := a.at.Add(a.took); a.runID != "" && a.at.After(since) && (first.IsZero() || done.Before(first)) {
			first = done
		}
	}
	return first
}

func (p *apiProbe) stop() []probeAnswer {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeAnswer{}, p.answers...)
}
