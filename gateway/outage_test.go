package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// statusOf returns the status code and Retry-After of a request with the stack's token.
func statusOf(t *testing.T, s *stack.Stack, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestDrainingGatewayRefusesNewRuns: a gateway told to drain refuses new runs with 503
// and Retry-After (a client or load balancer tries another gateway), reports itself
// not ready, and goes on serving the rest.
func TestDrainingGatewayRefusesNewRuns(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	code, _ := statusOf(t, s, http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, code)

	s.Server.Drain()
	for _, wait := range []string{"", "?wait=5s"} {
		code, retry := statusOf(t, s, http.MethodPost, "/v1/functions/hello/runs"+wait, `{"name":"x"}`)
		require.Equal(t, http.StatusServiceUnavailable, code, wait)
		require.Equal(t, "1", retry)
	}
	status, body := rawRequest(t, http.MethodPost, s.URL+"/v1/functions/hello/runs", s.Token, "application/json", strings.NewReader(`{}`))
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body["detail"], "shutting down and takes no new runs")
	code, _ = statusOf(t, s, http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "not ready")
	code, _ = statusOf(t, s, http.MethodGet, "/v1/runs", "")
	require.Equal(t, http.StatusOK, code, "reads go on")
}

// TestDatabaseOutage: while the database is unreachable the API answers 503 with
// Retry-After, a function's checkpoints are refused with 503 and retried by the SDK,
// and an answer the gateway could not write is kept and written once the database is
// back; the run goes on where it was, without a recovery or a failed attempt.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	proxy := pgtest.NewProxy(t, pgtest.DBURL(t))
	s := stack.Start(t, stack.Options{DatabaseURL: proxy.URL})

	var saw503, answered atomic.Bool
	cutA, cutB := make(chan struct{}), make(chan struct{})
	var releaseA, releaseB sync.Once
	// A test that fails midway releases the function, so that its server can close.
	t.Cleanup(func() {
		releaseA.Do(func() { close(cutA) })
		releaseB.Do(func() { close(cutB) })
	})
	// Request/response mode: the checkpoints' 503s are seen on the app's HTTP client.
	app := functions.New(functions.Config{Keys: s.Keys.Verification, RequestResponseOnly: true, HTTPClient: &http.Client{
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := http.DefaultTransport.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				saw503.Store(true)
			}
			return resp, err
		}),
	}})
	functions.Register(app, "blip", func(ctx context.Context, _ struct{}) (string, error) {
		a, err := step.Run(ctx, "a", func(ctx context.Context) (string, error) {
			<-cutA // the database goes down before this step's checkpoint
			return "a", nil
		})
		if err != nil {
			return "", err
		}
		b, err := step.Run(ctx, "b", func(ctx context.Context) (string, error) { return "b", nil })
		if err != nil {
			return "", err
		}
		<-cutB // and again before the answer
		return a + b, nil
	})
	s.Sync(t, s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app.ServeHTTP(w, r)
		if r.Method == http.MethodPost {
			answered.Store(true)
		}
	})))
	c := s.Client(t, s.Token)
	start, err := c.StartRunWithBodyWithResponse(t.Context(), "blip", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
	id := start.JSON202.ID
	awaitStatus := func(want int) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/v1/runs/"+id, nil)
			if !assert.NoError(ct, err) {
				return
			}
			req.Header.Set("Authorization", "Bearer "+s.Token)
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(ct, err) {
				return
			}
			resp.Body.Close()
			assert.Equal(ct, want, resp.StatusCode)
			if want == http.StatusServiceUnavailable {
				assert.Equal(ct, "1", resp.Header.Get("Retry-After"))
			}
		}, 30*time.Second, 10*time.Millisecond, "GET run answers %d", want)
	}
	awaitStatus(http.StatusOK)
	require.Eventually(t, func() bool { return s.Invoker.Status().InFlight == 1 }, 30*time.Second, 5*time.Millisecond)

	// Down before step a's checkpoint: the API answers 503, the checkpoint too, retried.
	proxy.Cut()
	awaitStatus(http.StatusServiceUnavailable)
	releaseA.Do(func() { close(cutA) })
	require.Eventually(t, saw503.Load, 30*time.Second, 5*time.Millisecond, "the checkpoint met the outage")
	proxy.Restore()
	awaitStatus(http.StatusOK)
	// a and b are journaled, each before its step.Run returned; the answer waits.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.GetRunWithResponse(t.Context(), id, nil)
		if assert.NoError(ct, err) && assert.NotNil(ct, resp.JSON200) {
			assert.Len(ct, resp.JSON200.Journal, 2)
		}
	}, 30*time.Second, 10*time.Millisecond)

	// Down before the answer: it is kept and written once the database is back.
	proxy.Cut()
	awaitStatus(http.StatusServiceUnavailable)
	releaseB.Do(func() { close(cutB) })
	require.Eventually(t, answered.Load, 30*time.Second, 5*time.Millisecond, "the function answered during the outage")
	proxy.Restore()

	resp, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusCompleted, resp.JSON200.Status)
	require.JSONEq(t, `"ab"`, string(*resp.JSON200.Output))
	detail := getRun(t, c, id)
	require.Equal(t, 1, detail.Invocations, "one invocation, through both outages")
	require.Equal(t, 0, detail.Recoveries)
	require.Empty(t, detail.Failures)
	require.Len(t, detail.Journal, 2, "a and b journaled, the answer kept through the outage")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
