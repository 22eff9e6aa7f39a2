package gatewayproc_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/gatewayproc"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

// logBuffer collects a process's logs, from any goroutine, for as long as it runs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const secret = "gatewayproc-test-secret-0123456789abcdef"

// config returns the config of a process on the database at url, listening on a free
// loopback port, logging to logs.
func config(t *testing.T, url string, logs *logBuffer) gatewayproc.Config {
	t.Helper()
	db, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	db.MaxConns = 6
	return gatewayproc.Config{
		Database: db, Logger: slog.New(slog.NewTextHandler(logs, nil)), Addr: "127.0.0.1:0",
		Auth: auth.Config{Secrets: [][]byte{[]byte(secret)}}, Egress: stack.Loopback,
	}
}

func start(t *testing.T, cfg gatewayproc.Config) *gatewayproc.Process {
	t.Helper()
	p, err := gatewayproc.Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(context.Background()) })
	return p
}

func healthz(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestStartMigratesAndServes: a process on a new, empty database migrates it, serves
// on its listener, and stops at once when nothing is in flight; stopping again is a
// no-op.
func TestStartMigratesAndServes(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	p := start(t, config(t, pgtest.EmptyDBURL(t), &logs))

	require.Equal(t, gatewayproc.LocalURL(p.Addr()), p.URL)
	require.Equal(t, http.StatusOK, healthz(t, p.URL))
	require.Contains(t, logs.String(), "gateway serving")
	var system, api string
	require.NoError(t, p.Pool.QueryRow(t.Context(), `SELECT current_user`).Scan(&system))
	require.NoError(t, p.APIPool.QueryRow(t.Context(), `SELECT current_user`).Scan(&api))
	require.Equal(t, "stepgate_system", system)
	require.Equal(t, "stepgate_app", api)

	p.Stop(t.Context()) // with nothing in flight, at once (a hang would outlast the test)
	require.ErrorIs(t, <-p.Done(), http.ErrServerClosed)
	require.Error(t, p.Pool.Ping(context.Background()), "the pools are closed")
	p.Stop(t.Context())
	require.NoError(t, p.Invoker.Stop(t.Context()), "stopping the invoker again is harmless")
	_, err := http.Get(p.URL + "/healthz")
	require.Error(t, err, "the listener is closed")
}

// TestPoolsSplitMaxConns: the two pools share Database.MaxConns.
func TestPoolsSplitMaxConns(t *testing.T) {
	t.Parallel()
	url := pgtest.DBURL(t)
	for _, tc := range []struct {
		name                string
		max, api            int32
		wantSystem, wantAPI int32
	}{
		{"Half", 40, 0, 20, 20},
		{"Odd", 7, 0, 4, 3},
		{"APIShare", 7, 2, 5, 2},
		{"AtLeastTwo", 2, 0, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs logBuffer
			cfg := config(t, url, &logs)
			cfg.Migrated = true
			cfg.Database.MaxConns, cfg.APIMaxConns = tc.max, tc.api
			p := start(t, cfg)
			require.Equal(t, tc.wantSystem, p.Pool.Config().MaxConns)
			require.Equal(t, tc.wantAPI, p.APIPool.Config().MaxConns)
		})
	}
}

// TestStartRefusesAnUnfencedUser: a database user that may not act as the gateway's
// roles would see no rows: Start fails, naming the grant that fixes it, and leaves
// nothing running.
func TestStartRefusesAnUnfencedUser(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.DBURL(t)
	user := pgtest.NewRole(t, url, "stepgate_plain", "PASSWORD 'plain'")

	var logs logBuffer
	cfg := config(t, url, &logs)
	cfg.Migrated = true
	cfg.Database.ConnConfig.User, cfg.Database.ConnConfig.Password = user, "plain"
	p, err := gatewayproc.Start(ctx, cfg)
	require.Nil(t, p)
	require.ErrorContains(t, err, "the database user "+user+" may not act as stepgate_system")
	require.ErrorContains(t, err, "GRANT stepgate_app, stepgate_system TO "+user)
	require.NotContains(t, logs.String(), "gateway serving")
}

// TestStartFailsOnABusyAddress: a listen error names the address, and what Start had
// opened is closed.
func TestStartFailsOnABusyAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var logs logBuffer
	cfg := config(t, pgtest.DBURL(t), &logs)
	cfg.Migrated = true
	cfg.Addr = ln.Addr().String()
	p, err := gatewayproc.Start(t.Context(), cfg)
	require.Nil(t, p)
	require.ErrorContains(t, err, "listen on "+cfg.Addr)
}

// TestStartWarnsOfSeveralHostsWithoutReadWrite: a database URL that names several hosts
// without target_session_attrs=read-write may land on a standby after a failover:
// Start warns, naming the setting; with it, it does not.
func TestStartWarnsOfSeveralHostsWithoutReadWrite(t *testing.T) {
	t.Parallel()
	url := pgtest.DBURL(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	for _, tc := range []struct {
		name                string
		twoHosts, readWrite bool
		warn                bool
	}{
		{name: "OneHost"},
		{name: "TwoHosts", twoHosts: true, warn: true},
		{name: "TwoHostsReadWrite", twoHosts: true, readWrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			cfg := config(t, url, &logs)
			cfg.Migrated = true
			if tc.twoHosts {
				// A second host after the primary: a standby that is down, say.
				cfg.Database.ConnConfig.Fallbacks = append(cfg.Database.ConnConfig.Fallbacks,
					&pgconn.FallbackConfig{Host: "127.0.0.1", Port: uint16(closed)})
			}
			if tc.readWrite {
				cfg.Database.ConnConfig.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
			}
			p := start(t, cfg)
			require.Equal(t, http.StatusOK, healthz(t, p.URL))
			if tc.warn {
				require.Contains(t, logs.String(), "names several hosts but not target_session_attrs=read-write")
			} else {
				require.NotContains(t, logs.String(), "target_session_attrs")
			}
		})
	}
}

// TestStopDrainsThenShutsDown: Stop lets the invocation in flight go on until
// DrainTimeout, hands it over, then ends the request waiting for its run (the requests'
// context), which is answered the run's status, and closes everything.
func TestStopDrainsThenShutsDown(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	cfg := config(t, pgtest.DBURL(t), &logs)
	cfg.Migrated = true
	cfg.DrainTimeout = 200 * time.Millisecond
	p := start(t, cfg)

	entered, abandoned := make(chan struct{}, 1), make(chan struct{}, 1)
	app := functions.New(functions.Config{Keys: p.Keys.Verification, Logger: cfg.Logger})
	functions.Register(app, "block", func(ctx context.Context, _ struct{}) (string, error) {
		entered <- struct{}{}
		<-ctx.Done() // until the gateway abandons the call
		abandoned <- struct{}{}
		return "", ctx.Err()
	})
	fn := httptest.NewServer(app)
	t.Cleanup(fn.Close)
	authCfg := cfg.Auth
	token, err := authCfg.NewToken(auth.Identity{Subject: "tester", Tenant: auth.DefaultTenant, Roles: []string{"admin"}}, time.Hour)
	require.NoError(t, err)
	client, err := protocol.NewClientWithResponses(p.URL, protocol.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	require.NoError(t, err)
	synced, err := client.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: fn.URL + "/"})
	require.NoError(t, err)
	require.NotNil(t, synced.JSON200, string(synced.Body))

	start, err := client.StartRunWithBodyWithResponse(t.Context(), "block", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.NotNil(t, start.JSON202, string(start.Body))
	id := start.JSON202.ID
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the function was not invoked")
	}
	// A caller waits for the run's result, and is attached to it.
	type answer struct {
		code int
		body string
		err  error
	}
	waited := make(chan answer, 1)
	go func() {
		resp, err := client.GetRunResultWithResponse(context.WithoutCancel(t.Context()), id, &protocol.GetRunResultParams{Wait: ptr("60s")})
		if err != nil {
			waited <- answer{err: err}
			return
		}
		waited <- answer{code: resp.StatusCode(), body: string(resp.Body)}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for attached := false; !attached; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the caller did not attach to the run")
		require.NoError(t, p.Pool.QueryRow(t.Context(), `SELECT notify FROM stepgate.run WHERE id = $1`, id).Scan(&attached))
	}
	require.Equal(t, 1, p.Invoker.Status().InFlight)

	stopped := make(chan struct{})
	began := time.Now()
	go func() { p.Stop(context.Background()); close(stopped) }()
	select {
	case <-abandoned:
	case <-time.After(30 * time.Second):
		t.Fatal("the call was not abandoned")
	}
	require.GreaterOrEqual(t, time.Since(began), cfg.DrainTimeout, "the invocation had its drain time")
	select {
	case a := <-waited:
		require.NoError(t, a.err, "the waiting request was answered before the server closed")
		require.Equal(t, http.StatusAccepted, a.code, "answered its run's status: %s", a.body)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting request was not answered")
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return")
	}
	require.Zero(t, p.Invoker.Status().InFlight)
	require.Contains(t, logs.String(), "draining: waiting for the invocations in flight to finish")
	require.NotContains(t, logs.String(), "interrupt again", "no DrainSignals")
	require.Contains(t, logs.String(), "draining: handed invocations over to the other gateways")
	require.ErrorIs(t, <-p.Done(), http.ErrServerClosed)
}

func TestLocalURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"0.0.0.0:8080":   "http://127.0.0.1:8080",
		"[::]:8080":      "http://127.0.0.1:8080",
		"127.0.0.1:9000": "http://127.0.0.1:9000",
		"10.1.2.3:80":    "http://10.1.2.3:80",
		"[::1]:8080":     "http://[::1]:8080",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		require.Equal(t, want, gatewayproc.LocalURL(a), addr)
	}
	require.Equal(t, "http://sock", gatewayproc.LocalURL(&net.UnixAddr{Name: "sock", Net: "unix"}))
}

func ptr[T any](v T) *T { return &v }
