package chaos_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

// tenant is the tenant of every run of the suite.
const tenant = "chaos"

// The gateway settings the suite passes. STEPGATE_LEASE_TTL, STEPGATE_DRAIN_TIMEOUT and
// STEPGATE_MAX_RECOVERIES are the crash-recovery knobs (a gateway that does not know them
// ignores them); their values here are their defaults.
var (
	leaseTTL     = 5 * time.Second
	drainTimeout = 30 * time.Second
)

// fleetConfig configures a fleet.
type fleetConfig struct {
	// DatabaseURL is a superuser URL of the scenario's database. Empty: a new migrated
	// database on the tests' server (internal/wiring/pgtest).
	DatabaseURL string
	// CheckURL is the URL the checks read the database with, when DatabaseURL is not a
	// direct one (a pooler's). Defaults to DatabaseURL.
	CheckURL string
	// Gateways is how many gateways share the database. Defaults to 2.
	Gateways int
	// MaxConns is each gateway's STEPGATE_DB_MAX_CONNS. Defaults to 12, so that several
	// scenarios share a server of 200 connections.
	MaxConns int
	// Env adds KEY=VALUE settings to every gateway's environment.
	Env []string
	// EachEnv, when set, adds KEY=VALUE settings to the environment of gateway i (from 0).
	EachEnv func(i int) []string
	// Metrics gives each gateway a metrics listener of its own (STEPGATE_METRICS_ADDR),
	// at gateway.metricsURL.
	Metrics bool
}

// fleet is a scenario's gateways on one database, and the superuser pool the checks
// read it with.
type fleet struct {
	t     *testing.T
	dir   string // logs
	dbURL string
	db    *pgxpool.Pool
	gws   []*gateway
	token string // an admin of tenant
	http  *http.Client
	turn  atomic.Uint64
}

// newFleet starts the gateways, each on a fixed port of its own so that a restarted
// gateway keeps its URL, and waits until each answers /healthz. They are killed when the
// test ends; when it failed, the end of each gateway's log is printed and the logs kept.
func newFleet(t *testing.T, cfg fleetConfig) *fleet {
	t.Helper()
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = pgtest.DBURL(t)
	}
	dir, err := os.MkdirTemp("", "stepgate-chaos-"+safeName(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, dir: dir, dbURL: cfg.DatabaseURL, http: &http.Client{Timeout: 15 * time.Second}}
	secret := make([]byte, 32)
	rand.Read(secret)
	jwtSecret := base64.RawURLEncoding.EncodeToString(secret)
	f.token, err = auth.Config{Secrets: [][]byte{[]byte(jwtSecret)}}.NewToken(
		auth.Identity{Subject: "chaos", Tenant: tenant, Roles: []string{"admin"}}, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(cmp.Or(cfg.CheckURL, cfg.DatabaseURL))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 4
	f.db, err = pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}

	base := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "STEPGATE_") || strings.HasPrefix(k, "PG") {
			continue
		}
		base = append(base, kv)
	}
	for i := range max(cfg.Gateways, 2) {
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		g := &gateway{
			name:    fmt.Sprintf("gw%d", i+1),
			addr:    addr,
			url:     "http://" + addr,
			bin:     gatewayBin,
			logPath: filepath.Join(dir, fmt.Sprintf("gw%d.log", i+1)),
		}
		g.env = append(append([]string{}, base...),
			"DATABASE_URL="+cfg.DatabaseURL,
			"STEPGATE_ADDR="+addr,
			"STEPGATE_PUBLIC_URL="+g.url,
			"STEPGATE_JWT_SECRET="+jwtSecret,
			"STEPGATE_ALLOWED_NETWORKS=127.0.0.0/8",
			// Loopback stands in for the public internet: runs show failures whole.
			"STEPGATE_PRIVATE_ERROR_DETAIL=true",
			"STEPGATE_DB_MAX_CONNS="+strconv.Itoa(cmp.Or(cfg.MaxConns, 12)),
			"STEPGATE_LEASE_TTL="+leaseTTL.String(),
			"STEPGATE_DRAIN_TIMEOUT="+drainTimeout.String(),
			"STEPGATE_MAX_RECOVERIES=100",
			"GORACE=log_path="+filepath.Join(dir, fmt.Sprintf("gw%d.race", i+1)),
		)
		g.env = append(g.env, cfg.Env...)
		if cfg.EachEnv != nil {
			g.env = append(g.env, cfg.EachEnv(i)...)
		}
		if cfg.Metrics {
			maddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
			g.metricsURL = "http://" + maddr + "/metrics"
			g.env = append(g.env, "STEPGATE_METRICS_ADDR="+maddr)
		}
		f.gws = append(f.gws, g)
	}
	t.Cleanup(func() {
		for _, g := range f.gws {
			g.kill()
		}
		f.db.Close()
		if races := f.races(); races != "" {
			t.Errorf("the race detector reported data races in a gateway:\n%s", races)
		}
		if t.Failed() {
			for _, g := range f.gws {
				t.Logf("end of %s (%s):\n%s", g.name, g.logPath, g.tail(60))
			}
			t.Logf("gateway logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	// One at a time: the first migrates (if needed); their River client ids (which
	// name the leader) are then told apart by their start times.
	for _, g := range f.gws {
		if err := g.start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// races returns the race detector's reports of the gateways, if any.
func (f *fleet) races() string {
	files, _ := filepath.Glob(filepath.Join(f.dir, "*.race.*"))
	var b strings.Builder
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			b.WriteString(p + ":\n" + string(data))
		}
	}
	return b.String()
}

// gatewayAt returns the name of the gateway listening on hostport, or hostport.
func (f *fleet) gatewayAt(hostport string) string {
	for _, g := range f.gws {
		if g.addr == hostport {
			return g.name
		}
	}
	return hostport
}

func (f *fleet) gateway(name string) *gateway {
	for _, g := range f.gws {
		if g.name == name {
			return g
		}
	}
	return nil
}

// running returns the gateways that are up.
func (f *fleet) running() []*gateway {
	var up []*gateway
	for _, g := range f.gws {
		if g.up() {
			up = append(up, g)
		}
	}
	return up
}

// --- the API -------------------------------------------------------------------------

// apiError is an answer the API gave that the caller did not expect.
type apiError struct {
	status int
	body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

// call sends one API request to g as the fleet's admin and returns the answer; body,
// when not nil, is encoded as JSON.
func (f *fleet) call(ctx context.Context, g *gateway, method, path string, body any, hdr http.Header) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.url+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// callOK is call that expects a 2xx and decodes its JSON into out (when not nil).
func (f *fleet) callOK(ctx context.Context, g *gateway, method, path string, body, out any) error {
	resp, b, err := f.call(ctx, g, method, path, body, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{resp.StatusCode, strings.TrimSpace(string(b))}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// start starts a run of function with input through the running gateways, taking turns,
// and returns its id. It retries on another gateway after a refused connection or a
// 5xx, for up to a minute; the Idempotency-Key makes a retry start the same run, never a
// second one.
func (f *fleet) start(ctx context.Context, function string, input any) (string, error) {
	key := rand.Text()
	var last error
	deadline := time.Now().Add(time.Minute)
	for try := 0; time.Now().Before(deadline); try++ {
		up := f.running()
		if len(up) == 0 {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		g := up[int(f.turn.Add(1))%len(up)]
		var run struct {
			ID string `json:"id"`
		}
		resp, b, err := f.call(ctx, g, http.MethodPost, "/v1/functions/"+function+"/runs", input, http.Header{"Idempotency-Key": {key}})
		switch {
		case ctx.Err() != nil:
			return "", ctx.Err()
		case err != nil:
			last = err
		case resp.StatusCode/100 == 2:
			if err := json.Unmarshal(b, &run); err != nil || run.ID == "" {
				return "", fmt.Errorf("start %s: HTTP %d: %s", function, resp.StatusCode, b)
			}
			return run.ID, nil
		case resp.StatusCode >= 500:
			last = &apiError{resp.StatusCode, string(b)}
		default:
			return "", fmt.Errorf("start %s on %s: %w", function, g.name, &apiError{resp.StatusCode, string(b)})
		}
		pause(ctx, time.Duration(min(try+1, 10))*20*time.Millisecond)
	}
	return "", fmt.Errorf("start %s: no gateway started it within a minute: %w", function, last)
}

// startMany starts n runs of function with input from `workers` goroutines and returns
// their ids, or the first error.
func (f *fleet) startMany(ctx context.Context, n, workers int, function string, input func(i int) any) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				id, err := f.start(ctx, function, input(i))
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				ids[i] = id
			}
		})
	}
	wg.Wait()
	return ids, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// --- gateway processes -----------------------------------------------------------------

// gateway is one `stepgate serve` process, started, killed and restarted on the same
// address with the same environment.
type gateway struct {
	name, addr, url string
	metricsURL      string // with fleetConfig.Metrics
	bin             string
	env             []string
	logPath         string

	mu    sync.Mutex
	lives []*life // one per start, the current one last
}

// life is one process of a gateway.
type life struct {
	began, ready time.Time // exec, and /healthz 200
	pid          int
	exited       chan struct{} // closed once the process exited; then err and ended are set
	err          error
	ended        time.Time
}

func (l *life) alive() bool {
	select {
	case <-l.exited:
		return false
	default:
		return true
	}
}

func (g *gateway) current() *life {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.lives) == 0 {
		return nil
	}
	return g.lives[len(g.lives)-1]
}

// pid returns the process id of the gateway's current process, or 0 when it is down.
func (g *gateway) pid() int {
	if l := g.current(); l != nil && l.alive() {
		return l.pid
	}
	return 0
}

// up reports whether the gateway's process runs.
func (g *gateway) up() bool {
	l := g.current()
	return l != nil && l.alive()
}

// start starts the gateway's process and waits until /healthz answers 200, for up to a
// minute and a half (a race-enabled gateway on a loaded machine is slow to start).
func (g *gateway) start(ctx context.Context) error {
	if g.up() {
		return fmt.Errorf("%s: already running", g.name)
	}
	logf, err := os.OpenFile(g.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	g.mu.Lock()
	n := len(g.lives) + 1
	g.mu.Unlock()
	fmt.Fprintf(logf, "=== chaos: %s start %d at %s\n", g.name, n, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(g.bin, "serve")
	cmd.Env = g.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// The gateway dies with the test process, even when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	l := &life{began: time.Now(), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start: %w", g.name, err)
	}
	l.pid = cmd.Process.Pid
	go func() {
		err := cmd.Wait()
		l.err, l.ended = err, time.Now()
		close(l.exited)
	}()
	g.mu.Lock()
	g.lives = append(g.lives, l)
	g.mu.Unlock()

	client := &http.Client{Timeout: time.Second}
	err = waitFor(ctx, 90*time.Second, g.name+" answers /healthz 200", func() (bool, error) {
		if !l.alive() {
			return false, fmt.Errorf("exited: %v", l.err)
		}
		resp, err := client.Get(g.url + "/healthz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("HTTP %d", resp.StatusCode)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, g.tail(30))
	}
	l.ready = time.Now()
	return nil
}

// kill kills the gateway's process with SIGKILL, waits for it to exit, and returns when
// it was killed. A gateway that is down is left alone (the zero time).
func (g *gateway) kill() time.Time {
	l := g.current()
	if l == nil || !l.alive() {
		return time.Time{}
	}
	at := time.Now()
	_ = syscall.Kill(l.pid, syscall.SIGKILL)
	<-l.exited
	return at
}

// terminate sends SIGTERM, as a deploy does, and waits up to timeout for the process to
// exit. It returns the exit code and when the signal was sent; past timeout it kills
// the process and returns an error.
func (g *gateway) terminate(timeout time.Duration) (code int, at time.Time, err error) {
	l := g.current()
	if l == nil || !l.alive() {
		return 0, time.Time{}, fmt.Errorf("%s is not running", g.name)
	}
	at = time.Now()
	if err := syscall.Kill(l.pid, syscall.SIGTERM); err != nil {
		return 0, at, err
	}
	select {
	case <-l.exited:
	case <-time.After(timeout):
		g.kill()
		return -1, at, fmt.Errorf("%s did not exit within %s of SIGTERM; killed", g.name, timeout)
	}
	var ee *exec.ExitError
	if errors.As(l.err, &ee) {
		return ee.ExitCode(), at, nil
	}
	return 0, at, l.err
}

// tail returns the last n lines of the gateway's log.
func (g *gateway) tail(n int) string {
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// riverIDTime reads the start time that River's default client id carries
// ("<host>_2006_01_02T15_04_05_000000", UTC).
var riverIDTime = regexp.MustCompile(`(\d{4}_\d{2}_\d{2}T\d{2}_\d{2}_\d{2})_(\d{6})$`)

// leader returns the gateway whose River client leads (river_leader), or nil when none
// does now. River names a client by its host and start time, which falls within one
// life of one gateway; a client id that names the gateway's address or name is also
// understood.
func (f *fleet) leader(ctx context.Context) (*gateway, error) {
	var id string
	err := f.db.QueryRow(ctx, `SELECT leader_id FROM river_leader WHERE expires_at > now() LIMIT 1`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, g := range f.gws {
		if strings.Contains(id, g.addr) || strings.HasSuffix(id, g.name) {
			return g, nil
		}
	}
	m := riverIDTime.FindStringSubmatch(id)
	if m == nil {
		return nil, fmt.Errorf("cannot tell which gateway River's leader %q is", id)
	}
	at, err := time.Parse("2006_01_02T15_04_05.000000", m[1]+"."+m[2])
	if err != nil {
		return nil, fmt.Errorf("leader %q: %w", id, err)
	}
	for _, g := range f.gws {
		g.mu.Lock()
		lives := append([]*life{}, g.lives...)
		g.mu.Unlock()
		for _, l := range lives {
			if !at.Before(l.began.Add(-time.Millisecond)) && (l.ready.IsZero() || !at.After(l.ready)) {
				if !l.alive() {
					return nil, nil // a dead leader whose term has not expired yet
				}
				return g, nil
			}
		}
	}
	return nil, fmt.Errorf("River's leader %q started at %s, when no gateway of this fleet started", id, at)
}

// --- ports, names, Postgres ------------------------------------------------------------

var ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// freePort returns a loopback port that was free a moment ago and that this process has
// not handed out before, so a gateway restarted on it keeps its URL. It is taken below
// the kernel's ephemeral range when it can be, so that no outgoing connection takes it
// as its local port while its gateway is down.
func freePort(t *testing.T) int {
	t.Helper()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	lo, hi := 20000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first, last int
		if _, err := fmt.Sscan(string(b), &first, &last); err == nil && first > 2048 {
			lo, hi = max(first/2, 1024), first
		}
	}
	for range 1000 {
		p := lo + mrand.IntN(hi-lo)
		if ports.used[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		ports.used[p] = true
		return p
	}
	t.Fatal("no free port")
	return 0
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9]+`)

func safeName(s string) string {
	s = strings.Trim(unsafeName.ReplaceAllString(s, "-"), "-")
	return s[:min(len(s), 40)]
}

// ownPostgres starts a Postgres server of the test's own, which the test may restart,
// and returns it with the superuser URL of a new database on it (the gateways migrate
// it). The URL is the server's unix socket, which a restart keeps.
func ownPostgres(t *testing.T) (*pgserver.Server, string) {
	t.Helper()
	// A short path: the unix socket's must fit in 107 bytes. Under /tmp, which the
	// postgres OS user can reach when the tests run as root.
	dir, err := os.MkdirTemp("", "sg-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
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
	return srv, srv.URL("chaos")
}
