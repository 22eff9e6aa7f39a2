package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/stack"
)

// TestLongPollsCountAsStreams: a request with ?wait (a run's start, result or value)
// holds a place among its subject's and tenant's live streams until it is answered, so
// the 11th at once of one subject is a 429 naming the limit, with Retry-After, that
// starts no run, while another subject and another tenant still get through; a place
// ended is free again.
func TestLongPollsCountAsStreams(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{}) // the defaults: 10 per subject, 100 per tenant
	release := make(chan struct{})
	var entered atomic.Int64
	app := s.NewApp()
	functions.Register(app, "held", func(ctx context.Context, _ struct{}) (string, error) {
		entered.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	started, err := c.StartRunWithBodyWithResponse(t.Context(), "held", nil, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.NotNil(t, started.JSON202, string(started.Body))
	run := started.JSON202.ID

	type answer struct {
		status     int
		retryAfter string
		detail     string
	}
	// send makes a request with token and answers what came back, or nothing until
	// cancel for a request still waiting when it is called.
	send := func(ctx context.Context, token, method, path string) answer {
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{}`)
		} else {
			body = strings.NewReader("")
		}
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{} // cancelled
		}
		defer resp.Body.Close()
		var p struct{ Detail string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return answer{resp.StatusCode, resp.Header.Get("Retry-After"), p.Detail}
	}
	result := func(wait string) string { return "/v1/runs/" + run + "/result?wait=" + wait }
	value := func(wait string) string { return "/v1/runs/" + run + "/values/progress?wait=" + wait }
	start := func(wait string) string { return "/v1/functions/held/runs?wait=" + wait }

	// holdTen holds ten long-polls of the admin's subject open, the ith request being
	// kind(i), until the stop it returns; a probe (1ms, answered at once when it gets
	// through) is refused once all ten hold their places.
	t.Cleanup(func() { close(release) })
	holdTen := func(kind func(i int) (method, path string)) (stop func()) {
		hold, cancel := context.WithCancel(context.Background())
		var held sync.WaitGroup
		for i := range 10 {
			method, path := kind(i)
			// Again while refused: a probe may hold a place for a moment.
			held.Go(func() {
				for hold.Err() == nil && send(hold, s.Token, method, path).status == http.StatusTooManyRequests {
				}
			})
		}
		stop = func() { cancel(); held.Wait() }
		t.Cleanup(stop)
		waitUntil(t, 30*time.Second, func() bool {
			return send(t.Context(), s.Token, http.MethodGet, result("1ms")).status == http.StatusTooManyRequests
		}, "429 for the 11th long-poll")
		return stop
	}
	accepted := func() bool {
		return send(t.Context(), s.Token, http.MethodGet, result("1ms")).status == http.StatusAccepted
	}

	stop := holdTen(func(i int) (string, string) {
		switch i % 3 {
		case 1:
			return http.MethodGet, value("60s")
		case 2:
			return http.MethodPost, start("10m")
		}
		return http.MethodGet, result("10m")
	})
	// The first run and the three held starts' runs: a held start creates its run after
	// taking its place.
	waitUntil(t, 30*time.Second, func() bool { return allRuns(t, s) == 4 && entered.Load() >= 4 }, "the held starts' runs, in the function")
	for _, p := range []struct{ method, path string }{
		{http.MethodGet, result("1ms")}, {http.MethodGet, value("1ms")}, {http.MethodPost, start("1ms")},
	} {
		a := send(t.Context(), s.Token, p.method, p.path)
		require.Equal(t, http.StatusTooManyRequests, a.status, "%s %s", p.method, p.path)
		require.Equal(t, "1", a.retryAfter)
		require.Equal(t, "tester has 10 live streams open on this gateway, the limit per subject (long-polls with ?wait count): close one first", a.detail)
	}
	require.Equal(t, 4, allRuns(t, s), "a refused start creates no run")
	// Without wait nothing is held, and nothing is refused.
	require.Equal(t, http.StatusAccepted, send(t.Context(), s.Token, http.MethodGet, "/v1/runs/"+run+"/result").status)

	other := s.NewToken(t, auth.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})
	require.Equal(t, http.StatusAccepted, send(t.Context(), other, http.MethodGet, result("1ms")).status, "another subject of the tenant")
	globex := s.NewToken(t, auth.Identity{Subject: "tester", Tenant: "globex", Roles: []string{"viewer"}})
	a := send(t.Context(), globex, http.MethodGet, "/v1/runs/"+uuid.NewString()+"/result?wait=1ms")
	require.Equal(t, http.StatusNotFound, a.status, "another tenant's long-poll (of its own runs: none) gets through: %s", a.detail)

	stop()
	waitUntil(t, 30*time.Second, accepted, "a long-poll accepted once the others ended")

	// A start whose caller leaves frees its place.
	stop = holdTen(func(int) (string, string) { return http.MethodPost, start("10m") })
	// The first run, the three starts held before and these ten are all in the function:
	// the three, still invoked, hold no place.
	waitUntil(t, 30*time.Second, func() bool { return entered.Load() >= 14 }, "the ten starts' invocations")
	stop()
	waitUntil(t, 30*time.Second, accepted, "a long-poll accepted once the callers of ten starts left")
}

// allRuns counts the runs of every tenant.
func allRuns(t *testing.T, s *stack.Stack) (n int) {
	t.Helper()
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run`).Scan(&n))
	return n
}
