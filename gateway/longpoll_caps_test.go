package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

// heldApp serves the function "held", which waits until the test ends (or its
// invocation is cancelled), counting its entries by the subject that started the run.
type heldApp struct {
	mu      sync.Mutex
	entered map[string]int
}

func serveHeld(t *testing.T, s *stack.Stack) *heldApp {
	t.Helper()
	h := &heldApp{entered: map[string]int{}}
	release := make(chan struct{})
	app := s.NewApp()
	functions.Register(app, "held", func(ctx context.Context, _ struct{}) (string, error) {
		h.mu.Lock()
		h.entered[functions.IdentityFrom(ctx).Subject]++
		h.mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	})
	s.Sync(t, s.ServeApp(t, app))
	t.Cleanup(func() { close(release) }) // before the app's server closes
	return h
}

// in says how many times the function was entered for runs started by subject: at
// least once per run (a retried invocation enters again).
func (h *heldApp) in(subject string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entered[subject]
}

// answer is what came back to a request: nothing (status 0) for one whose caller left.
type answer struct {
	status     int
	retryAfter string
	detail     string
	closed     bool // the gateway closes the connection after it (Connection: close)
}

// poll makes a request with token and answers what came back.
func poll(t *testing.T, ctx context.Context, s *stack.Stack, token, method, path string) answer {
	t.Helper()
	body := strings.NewReader("")
	if method == http.MethodPost {
		body = strings.NewReader(`{}`)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{} // the caller left
	}
	defer resp.Body.Close()
	var p struct{ Detail string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return answer{resp.StatusCode, resp.Header.Get("Retry-After"), p.Detail, resp.Close}
}

// hold holds n requests of token open, the ith being kind(i), until the stop it returns
// (also called when the test ends), once held says they all hold their places. A
// request refused with a 429 is made again: a probe may hold a place for a moment.
func hold(t *testing.T, s *stack.Stack, token string, n int, kind func(i int) (method, path string), held func() bool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		method, path := kind(i)
		wg.Go(func() {
			for ctx.Err() == nil && poll(t, ctx, s, token, method, path).status == http.StatusTooManyRequests {
			}
		})
	}
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	waitUntil(t, 30*time.Second, held, "the held requests in their places")
	return stop
}

// allRuns counts the runs of every tenant.
func allRuns(t *testing.T, s *stack.Stack) (n int) {
	t.Helper()
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run`).Scan(&n))
	return n
}

// lockedBuffer is an io.Writer for the gateway's logs that a test reads meanwhile.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLongPollsCountAsStreams: a run's result or value with ?wait holds a place among its
// subject's and tenant's live streams until it is answered or its caller leaves, so the
// 11th at once of one subject is a 429 naming the limit, with Retry-After, on a
// connection the gateway closes; another subject and another tenant still get through,
// and so does a start with ?wait (caps of its own); a place given up is free again, and
// its caller leaving logs no error.
func TestLongPollsCountAsStreams(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	s := stack.Start(t, stack.Options{Logs: logs}) // the defaults: 10 per subject, 100 per tenant
	serveHeld(t, s)
	started := poll(t, t.Context(), s, s.Token, http.MethodPost, "/v1/functions/held/runs")
	require.Equal(t, http.StatusAccepted, started.status, started.detail)
	var run string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id FROM stepgate.run`).Scan(&run))

	result := func(wait string) string { return "/v1/runs/" + run + "/result?wait=" + wait }
	value := func(wait string) string { return "/v1/runs/" + run + "/values/progress?wait=" + wait }
	refused := func() bool {
		return poll(t, t.Context(), s, s.Token, http.MethodGet, result("1ms")).status == http.StatusTooManyRequests
	}
	stop := hold(t, s, s.Token, 10, func(i int) (string, string) {
		if i%2 == 1 {
			return http.MethodGet, value("60s")
		}
		return http.MethodGet, result("10m")
	}, refused)

	for _, path := range []string{result("1ms"), value("1ms")} {
		a := poll(t, t.Context(), s, s.Token, http.MethodGet, path)
		require.Equal(t, http.StatusTooManyRequests, a.status, path)
		require.Equal(t, "1", a.retryAfter)
		require.Equal(t, "tester has 10 live streams open on this gateway, the limit per subject (long-polls with ?wait count): close one first", a.detail)
		require.True(t, a.closed, "a refused long-poll's connection is closed, not kept alive")
	}
	// Without wait nothing is held, and nothing is refused.
	require.Equal(t, http.StatusAccepted, poll(t, t.Context(), s, s.Token, http.MethodGet, "/v1/runs/"+run+"/result").status)
	// A start with wait holds a place among the starts with wait, not among the streams.
	a := poll(t, t.Context(), s, s.Token, http.MethodPost, "/v1/functions/held/runs?wait=1ms")
	require.Equal(t, http.StatusAccepted, a.status, a.detail)

	other := s.NewToken(t, auth.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})
	require.Equal(t, http.StatusAccepted, poll(t, t.Context(), s, other, http.MethodGet, result("1ms")).status, "another subject of the tenant")
	globex := s.NewToken(t, auth.Identity{Subject: "tester", Tenant: "globex", Roles: []string{"viewer"}})
	a = poll(t, t.Context(), s, globex, http.MethodGet, "/v1/runs/"+uuid.NewString()+"/result?wait=1ms")
	require.Equal(t, http.StatusNotFound, a.status, "another tenant's long-poll (of its own runs: none) gets through: %s", a.detail)

	// The callers leave: their places are free again.
	stop()
	waitUntil(t, 30*time.Second, func() bool {
		return poll(t, t.Context(), s, s.Token, http.MethodGet, result("1ms")).status == http.StatusAccepted
	}, "a long-poll accepted once the others' callers left")
	require.NotContains(t, logs.String(), `"msg":"request failed"`, "a caller leaving is not an error")
}

// TestSyncStartsHaveCapsOfTheirOwn: a start with ?wait holds a place among its
// subject's and tenant's starts with ?wait (not among the live streams) until it is
// answered or its caller leaves: past the limit it is a 429 naming it, with
// Retry-After, that creates no run; a start without wait, a long-poll, another subject
// (up to the tenant's limit) and another tenant still get through.
func TestSyncStartsHaveCapsOfTheirOwn(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: func(c *gateway.Config) {
		c.MaxSyncStartsPerSubject, c.MaxSyncStartsPerTenant = 2, 3
		c.MaxStreamsPerSubject = 1 // a start that took a stream's place would fill it
	}})
	h := serveHeld(t, s)
	start := func(wait string) string { return "/v1/functions/held/runs?wait=" + wait }
	syncStart := func(int) (string, string) { return http.MethodPost, start("10m") }

	stop := hold(t, s, s.Token, 2, syncStart, func() bool { return h.in("tester") >= 2 })
	require.Equal(t, 2, allRuns(t, s))
	// A wait of 1ms: a start let through would be answered at once.
	a := poll(t, t.Context(), s, s.Token, http.MethodPost, start("1ms"))
	require.Equal(t, http.StatusTooManyRequests, a.status, a.detail)
	require.Equal(t, "1", a.retryAfter)
	require.Equal(t, "tester has 2 starts with ?wait waiting on this gateway, the limit per subject: start without wait, or once one is answered", a.detail)
	require.Equal(t, 2, allRuns(t, s), "a refused start creates no run")

	a = poll(t, t.Context(), s, s.Token, http.MethodPost, "/v1/functions/held/runs")
	require.Equal(t, http.StatusAccepted, a.status, "a start without wait: %s", a.detail)
	var run string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id FROM stepgate.run ORDER BY id DESC LIMIT 1`).Scan(&run))
	a = poll(t, t.Context(), s, s.Token, http.MethodGet, "/v1/runs/"+run+"/result?wait=1ms")
	require.Equal(t, http.StatusAccepted, a.status, "a long-poll, in the one stream's place: %s", a.detail)

	ada := s.NewToken(t, auth.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"developer"}})
	hold(t, s, ada, 1, syncStart, func() bool { return h.in("ada") >= 1 })
	cy := s.NewToken(t, auth.Identity{Subject: "cy", Tenant: auth.DefaultTenant, Roles: []string{"developer"}})
	a = poll(t, t.Context(), s, cy, http.MethodPost, start("1ms"))
	require.Equal(t, http.StatusTooManyRequests, a.status, a.detail)
	require.Equal(t, `tenant "default" has 3 starts with ?wait waiting on this gateway, its limit: start without wait, or once one is answered`, a.detail)
	globex := s.NewToken(t, auth.Identity{Subject: "tester", Tenant: "globex", Roles: []string{"developer"}})
	a = poll(t, t.Context(), s, globex, http.MethodPost, start("1ms"))
	require.Equal(t, http.StatusNotFound, a.status, "another tenant's start gets past the caps (to a function it has not: none): %s", a.detail)

	// The callers leave: their places are free again, their runs go on.
	stop()
	waitUntil(t, 30*time.Second, func() bool {
		return poll(t, t.Context(), s, s.Token, http.MethodPost, start("1ms")).status == http.StatusAccepted
	}, "a start with wait accepted once two callers left")
}

// TestALongPollWhoseCallerLeavesIsNoError: a value's long-poll whose caller leaves while
// the gateway reads the database (here, held up by a lock on the run) is logged as the
// caller leaving, at debug level, not as an ERROR "request failed ... context canceled".
func TestALongPollWhoseCallerLeavesIsNoError(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	s := stack.Start(t, stack.Options{Logs: logs})
	h := serveHeld(t, s)
	a := poll(t, t.Context(), s, s.Token, http.MethodPost, "/v1/functions/held/runs")
	require.Equal(t, http.StatusAccepted, a.status, a.detail)
	waitUntil(t, 30*time.Second, func() bool { return h.in("tester") >= 1 }, "the run in its function")
	var run string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id FROM stepgate.run`).Scan(&run))

	// The run's row locked: a long-poll's attach (UPDATE ... SET notify) waits for it, the
	// one statement of the test's database that waits for a lock.
	tx, err := s.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM stepgate.run WHERE id = $1 FOR UPDATE`, run)
	require.NoError(t, err)

	ctx, leave := context.WithCancel(t.Context())
	answered := make(chan answer, 1)
	go func() {
		answered <- poll(t, ctx, s, s.Token, http.MethodGet, "/v1/runs/"+run+"/values/progress?wait=60s")
	}()
	waitUntil(t, 30*time.Second, func() bool {
		var n int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `
			SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid)
			WHERE datname = current_database() AND NOT granted`).Scan(&n))
		return n > 0
	}, "the long-poll's attach waiting for the lock")
	leave()
	require.Equal(t, answer{}, <-answered)
	waitUntil(t, 30*time.Second, func() bool {
		l := logs.String()
		return strings.Contains(l, `"msg":"request ended: the caller left"`) || strings.Contains(l, `"msg":"request failed"`)
	}, "the request's end logged")
	require.NotContains(t, logs.String(), `"msg":"request failed"`)
	require.Contains(t, logs.String(), `"level":"DEBUG","msg":"request ended: the caller left","method":"GET","path":"/v1/runs/`+run+`/values/progress"`)
}

// manyLongPolls lifts the caps on one subject's long-polls for a test whose parallel
// subtests share one token, each waiting for its runs' results: on a machine with more
// than 10 cores, more than 10 of them may wait at once.
func manyLongPolls(c *gateway.Config) { c.MaxStreamsPerSubject, c.MaxStreamsPerTenant = 1000, 1000 }
