package chaos_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

// PgBouncer in front of the database (issue 44, item 2): the gateways' DATABASE_URL goes
// through PgBouncer in transaction mode (STEPGATE_DATABASE_POOLER=transaction), with a
// small pool of server connections, and they run the suite's core scenarios through it.

// testPgBouncer: two gateways through PgBouncer, LISTEN over a direct URL
// (STEPGATE_DATABASE_LISTEN_URL).
func testPgBouncer(t *testing.T) { testThroughPgBouncer(t, true) }

// testPgBouncerPolling: two gateways through PgBouncer and nothing else: no LISTEN, the
// gateways poll.
func testPgBouncerPolling(t *testing.T) { testThroughPgBouncer(t, false) }

// pgbouncerPoolSize is PgBouncer's default_pool_size in the scenarios: the server
// connections of the gateways' database, for 2 gateways of 12 client connections each.
const pgbouncerPoolSize = 6

func testThroughPgBouncer(t *testing.T, listen bool) {
	direct := pgtest.DBURL(t)
	pooled := startPgBouncer(t, direct, pgbouncerPoolSize)
	env := []string{"STEPGATE_DATABASE_POOLER=transaction"}
	if listen {
		env = append(env, "STEPGATE_DATABASE_LISTEN_URL="+direct)
	}
	s := newScenario(t, fleetConfig{DatabaseURL: pooled, CheckURL: direct, Env: env})
	ids := s.coreScenarios()
	s.note("through PgBouncer (pool_mode=transaction, default_pool_size=%d), LISTEN %s: %d runs",
		pgbouncerPoolSize, map[bool]string{true: "over STEPGATE_DATABASE_LISTEN_URL", false: "nowhere (polling)"}[listen], len(ids))
	s.checkServerConnections(direct, pgbouncerPoolSize, listen)
}

// coreScenarios runs the suite's core scenarios on the fleet and checks them: chains of
// steps, durable sleeps, waits for an event, a message received, a child run, a schedule
// ticking every second, a run cancelled while it waits, and waits for a run's result on
// every gateway. Every run completes (the cancelled one is cancelled), no (run, seq)
// twice, no gap, no step run again. It returns the ids of the runs it checked.
func (s *scenario) coreScenarios() []string {
	t, ctx := s.t, s.ctx
	const schedule = "chaos-core-tick"
	if err := s.f.callOK(ctx, s.f.gws[0], http.MethodPut, "/v1/schedules/"+schedule,
		map[string]any{"function": fnTick, "cron": "@every 1s"}, nil); err != nil {
		t.Fatalf("put the schedule: %v", err)
	}
	since := time.Now()
	n := size(6, 20)
	var ids []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	sent := &sentRecord{}
	add := func(function string, input func(i int) any, after func(id string) error) {
		wg.Go(func() {
			got, err := s.f.startMany(ctx, n, 4, function, input)
			if err != nil {
				t.Errorf("start %s: %v", function, err)
			}
			for _, id := range got {
				if id == "" || after == nil {
					continue
				}
				if err := after(id); err != nil {
					t.Error(err)
				}
			}
			mu.Lock()
			ids = append(ids, got...)
			mu.Unlock()
		})
	}
	add(fnChain, func(int) any { return shortRun }, nil)
	add(fnNap, func(int) any { return struct{}{} }, nil)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = rand.Text()
	}
	add(fnAwait, func(i int) any { return awaitInput{Key: keys[i]} }, nil)
	add(fnMailbox, func(int) any { return struct{}{} }, func(id string) error { return s.sendGo(ctx, id) })
	add(fnParent, func(int) any { return struct{}{} }, nil)
	wg.Wait()
	// Pay each await run its event, now that all have started.
	awaits, err := s.f.runsOf(ctx, fnAwait)
	if err != nil {
		t.Fatal(err)
	}
	for id := range awaits {
		var key string
		if err := s.f.db.QueryRow(ctx, `SELECT input->>'key' FROM stepgate.run WHERE id = $1`, id).Scan(&key); err != nil {
			t.Fatalf("read the key of run %s: %v", id, err)
		}
		if err := s.payRecorded(ctx, id, key, sent); err != nil {
			t.Error(err)
		}
	}

	// A run cancelled while it waits for an event nobody sends.
	cancelled, err := s.f.start(ctx, fnAwait, awaitInput{Key: "never-" + rand.Text()})
	if err != nil {
		t.Fatalf("start the run to cancel: %v", err)
	}
	if err := waitFor(ctx, stuckAfter, "the run to cancel suspended", func() (bool, error) {
		var status string
		err := s.f.db.QueryRow(ctx, `SELECT status FROM stepgate.run WHERE id = $1`, cancelled).Scan(&status)
		return status == "suspended", err
	}); err != nil {
		t.Error(err)
	}
	if err := s.f.callOK(ctx, s.f.gws[1%len(s.f.gws)], http.MethodPost, "/v1/runs/"+cancelled+"/cancel", map[string]any{}, nil); err != nil {
		t.Errorf("cancel run %s: %v", cancelled, err)
	}

	ids = append(ids, s.checkWaiters(2)...)
	s.checkTicks(fnTick, since, 3)
	if err := s.f.callOK(ctx, s.f.gws[0], http.MethodDelete, "/v1/schedules/"+schedule, nil, nil); err != nil {
		t.Errorf("delete the schedule: %v", err)
	}
	ticks, err := s.f.runsOf(ctx, fnTick)
	if err != nil {
		t.Fatal(err)
	}
	children, err := s.f.runsOf(ctx, fnChain)
	if err != nil {
		t.Fatal(err)
	}
	for id := range ticks {
		ids = append(ids, id)
	}
	for id := range children { // the parents' children among them
		ids = append(ids, id)
	}
	for id := range awaits {
		ids = append(ids, id)
	}
	ids = dedupe(ids)
	s.settle(ids, stuckAfter, completedWithoutFailure)
	s.checkSent(sent)
	runs := s.settle([]string{cancelled}, stuckAfter, func(r *runRow) string {
		if r.Status != "cancelled" {
			return "ended " + r.Status + ", not cancelled"
		}
		return ""
	})
	if r := runs[cancelled]; r == nil || r.Status != "cancelled" {
		t.Errorf("the run cancelled while it waited did not end cancelled: %v", r)
	}
	return append(ids, cancelled)
}

// sendGo sends run id (of mailbox) its message, retrying an unavailable API for up to
// a minute.
func (s *scenario) sendGo(ctx context.Context, id string) error {
	mid := rand.Text()
	var last error
	for try := 0; try < 100; try++ {
		g := s.f.gws[try%len(s.f.gws)]
		resp, b, err := s.f.call(ctx, g, http.MethodPost, "/v1/runs/"+id+"/messages",
			map[string]any{"topic": goTopic, "id": mid, "data": map[string]any{"try": try}}, nil)
		switch {
		case err != nil:
			last = err
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode >= 500:
			last = &apiError{resp.StatusCode, string(b)}
		default:
			return fmt.Errorf("message to run %s: %w", id, &apiError{resp.StatusCode, string(b)})
		}
		pause(ctx, 500*time.Millisecond)
	}
	return fmt.Errorf("message to run %s: not acknowledged: %w", id, last)
}

func dedupe(ids []string) []string {
	seen := map[string]bool{}
	out := ids[:0]
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// checkServerConnections notes the connections the database serves to the scenario's
// database (pg_stat_activity, read on the direct URL): through PgBouncer, at most its
// pool size, plus the direct LISTEN connections (two per gateway) when listen.
func (s *scenario) checkServerConnections(direct string, poolSize int, listen bool) {
	byApp := s.connections(direct)
	total := 0
	for _, n := range byApp {
		total += n
	}
	s.note("server connections to the database now: %d (%s)", total, fmtCounts(byApp))
	want := poolSize + 4 // the checks' own pool
	if listen {
		want += 2 * len(s.f.gws)
	}
	if total > want {
		s.t.Errorf("%d server connections to the database; want at most %d (PgBouncer's pool, the checks' 4, and the direct LISTEN connections)", total, want)
	}
}

// connections counts the backends connected to the database of dbURL, by
// application_name (PgBouncer's are "", as the gateways' are), from pg_stat_activity.
func (s *scenario) connections(dbURL string) map[string]int {
	cc, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	rows, _ := s.f.db.Query(s.ctx, `SELECT coalesce(nullif(application_name, ''), backend_type), count(*)
		FROM pg_stat_activity WHERE datname = $1 GROUP BY 1`, cc.Database)
	out := map[string]int{}
	for rows.Next() {
		var app string
		var n int
		if err := rows.Scan(&app, &n); err != nil {
			s.t.Fatal(err)
		}
		out[app] = n
	}
	if err := rows.Err(); err != nil {
		s.t.Fatalf("read pg_stat_activity: %v", err)
	}
	return out
}

// startPgBouncer starts PgBouncer on a free port of 127.0.0.1 in front of the database
// of direct (a URL whose user may SET ROLE stepgate_system: the migrations' user or a
// superuser), in transaction mode with default_pool_size poolSize, each server
// connection made to act as stepgate_system by connect_query, as docs/operations.md
// shows. It returns the URL of the database through it, and stops it when the test
// ends. It skips the test when the pgbouncer binary is not installed.
func startPgBouncer(t *testing.T, direct string, poolSize int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
			if _, err2 := os.Stat(p); err2 == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Skip("chaos: the pgbouncer binary is not installed (apt-get install -y pgbouncer); this scenario runs the gateways behind it")
	}
	cc, err := pgconn.ParseConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sg-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	// PgBouncer refuses to run as root: run it as the postgres OS user then, as the
	// private Postgres servers run.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("chaos: running as root needs the postgres OS user to run pgbouncer as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	entry := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cc.Host, cc.Port, cc.Database, cc.User)
	if cc.Password != "" {
		entry += " password=" + cc.Password
	}
	entry += " connect_query='SET ROLE stepgate_system'"
	ini := fmt.Sprintf(`[databases]
%s = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 1000
max_db_connections = %d
server_lifetime = 3600
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, cc.Database, entry, port, poolSize, poolSize, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	cfgPath := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfgPath, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, cfgPath)
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := os.Create(filepath.Join(dir, "pgbouncer.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // PgBouncer's immediate shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pgbouncer's files kept in %s", dir)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitFor(t.Context(), 10*time.Second, "pgbouncer listening on "+addr, func() (bool, error) {
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			o, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.out"))
			return false, fmt.Errorf("pgbouncer exited: %s%s", o, b)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", Host: addr, Path: "/" + cc.Database, RawQuery: "sslmode=disable"}
	if cc.Password != "" {
		u.User = url.UserPassword(cc.User, cc.Password)
	} else {
		u.User = url.User(cc.User)
	}
	return u.String()
}
