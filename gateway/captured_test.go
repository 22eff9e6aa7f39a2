package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// captured is a request the gateway sent to a function, as a proxy on the way saw it.
type captured struct {
	path, sig string
	body      []byte
}

// capturing records every POST that reaches h, by path.
type capturing struct {
	h  http.Handler
	mu sync.Mutex
	by map[string][]captured
}

func (c *capturing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.mu.Lock()
		c.by[r.URL.Path] = append(c.by[r.URL.Path], captured{r.URL.Path, r.Header.Get(signature.Header), body})
		c.mu.Unlock()
	}
	c.h.ServeHTTP(w, r)
}

func (c *capturing) first(t *testing.T, path string) captured {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.by[path], "no request to %s was captured", path)
	return c.by[path][0]
}

// resend sends a captured request again to url and returns the status and the error the
// function answered: its body's, or its answer's when it answered 200.
func resend(t *testing.T, url string, c captured) (int, protocol.ErrorInfo) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(c.body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signature.Header, c.sig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusOK {
		var a protocol.InvocationAnswer
		require.NoError(t, json.Unmarshal(raw, &a), string(raw))
		require.Equal(t, protocol.AnswerStatusFailed, a.Status, string(raw))
		require.NotNil(t, a.Error, string(raw))
		return resp.StatusCode, *a.Error
	}
	var e protocol.ErrorInfo
	require.NoError(t, json.Unmarshal(raw, &e), string(raw))
	return resp.StatusCode, e
}

// TestCapturedInvocation sends a signed invocation that a proxy captured on its way to a
// function again, after its run finished: to a fresh process of the same app (whose
// replay memory is empty, as a new serverless instance's or another replica's is), and to
// another function of the app. No step runs again, and every copy is refused.
func TestCapturedInvocation(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)

	var charges, refunds atomic.Int32
	// newApp is a new process of the app: its own replay memory.
	newApp := func() *functions.App {
		app := s.NewRequestApp()
		functions.Register(app, "pay.charge", func(ctx context.Context, _ struct{}) (string, error) {
			return step.Run(ctx, "charge", func(context.Context) (string, error) {
				charges.Add(1)
				return "ch_1", nil
			})
		})
		functions.Register(app, "pay.refund", func(ctx context.Context, _ struct{}) (string, error) {
			return step.Run(ctx, "refund", func(context.Context) (string, error) {
				refunds.Add(1)
				return "re_1", nil
			})
		})
		return app
	}
	proxy := &capturing{h: newApp(), by: map[string][]captured{}}
	appURL := s.ServeApp(t, proxy)
	s.Sync(t, appURL)
	run := mustComplete(t, c, "pay.charge", `{}`)
	require.EqualValues(t, 1, charges.Load())
	charge := proxy.first(t, "/pay.charge")
	fresh := s.ServeApp(t, newApp())

	// The signature still verifies there (within its 5 minutes, never seen by that
	// process), but the run has finished: the invocation owns it no more, so the
	// charge's step does not run, and the function answers the superseded failure that
	// a stale invocation answers (which no gateway applies).
	code, e := resend(t, fresh+"pay.charge", charge)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "superseded", e.Type, e.Message)
	require.Contains(t, e.Message, "no longer owns the run")
	require.EqualValues(t, 1, charges.Load(), "the charge ran once")
	// The process that took it first refuses it as a replay.
	code, e = resend(t, appURL+"pay.charge", charge)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, signature.ErrReplayed.Error(), e.Message)

	// Another function of the same app, in a process that never saw the request or in
	// the first one: the signature binds the path.
	for _, url := range []string{s.ServeApp(t, newApp()) + "pay.refund", appURL + "pay.refund"} {
		code, e = resend(t, url, charge)
		require.Equal(t, http.StatusUnauthorized, code, url)
		require.Equal(t, "signature", e.Type)
		require.Equal(t, signature.ErrMismatch.Error(), e.Message)
	}
	require.EqualValues(t, 1, charges.Load(), "the charge ran once")
	require.Zero(t, refunds.Load(), "the refund never ran")
	got := getRun(t, c, run.ID)
	require.Equal(t, protocol.RunStatusCompleted, got.Status)
	require.Equal(t, 1, got.Invocations)

	t.Run("ToAnotherNameAtThePath", func(t *testing.T) {
		// The gateway's function pay.other at the path of pay.charge: its requests are
		// signed for that path, but the body names pay.other, which the path does not
		// serve. Where the gateway reads the app's manifest, it refuses the registration
		// (TestRegisterWhereAnotherFunctionIsServed); behind a proxy that hides the
		// manifest, it cannot tell, and the SDK refuses each invocation.
		one := 1
		cfg := &protocol.FunctionConfig{Retries: &protocol.RetryPolicy{MaxAttempts: &one}}
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "pay.other", protocol.FunctionRegistration{URL: appURL + "pay.charge", Config: cfg})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		hidden := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.NotFound(w, r)
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		resp, err = c.RegisterFunctionWithResponse(t.Context(), "pay.other", protocol.FunctionRegistration{URL: hidden + "pay.charge", Config: cfg})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		start := startRun(t, c, "pay.other", `{}`, nil)
		require.Equal(t, http.StatusOK, start.StatusCode(), string(start.Body))
		require.Equal(t, protocol.RunStatusFailed, start.JSON200.Status, string(start.Body))
		require.Contains(t, start.JSON200.Error.Message, `the request is for function \"pay.other\"; this path serves \"pay.charge\"`)
		require.EqualValues(t, 1, charges.Load(), "the charge did not run for it")
	})

	t.Run("TheCheckIsTheRunsOwn", func(t *testing.T) {
		// The token of one run's invocation answers nothing of another run's.
		var req protocol.InvocationRequest
		require.NoError(t, json.Unmarshal(charge.body, &req))
		other := mustComplete(t, c, "pay.refund", `{}`)
		url := strings.Replace(req.Checkpoint.URL, run.ID, other.ID, 1) + "/current"
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"nonce":"`+strings.Repeat("0", 32)+`"}`))
		require.NoError(t, err)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
		require.Contains(t, string(body), "invocation token is for another run")
	})
}

// gate holds a function at one point until the test releases it, once: the first call of
// wait closes reached, and every call waits for release (or its context).
type gate struct {
	reached, release chan struct{}
	once, opened     sync.Once
}

func newGate() *gate { return &gate{reached: make(chan struct{}), release: make(chan struct{})} }

// open lets the function go on.
func (g *gate) open() { g.opened.Do(func() { close(g.release) }) }

func (g *gate) wait(ctx context.Context) {
	if g == nil {
		return
	}
	g.once.Do(func() { close(g.reached) })
	select {
	case <-g.release:
	case <-ctx.Done():
	}
}

// reachedWithin waits for the function to reach g.
func (g *gate) reachedWithin(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(d):
		t.Fatalf("the function did not reach %s within %s", what, d)
	}
}

// sendAgain sends a captured request again to url and returns the function's answer, which
// must be HTTP 200.
func sendAgain(t *testing.T, url string, c captured) protocol.InvocationAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(c.body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signature.Header, c.sig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var a protocol.InvocationAnswer
	require.NoError(t, json.Unmarshal(raw, &a), string(raw))
	return a
}

// askCurrent claims the run of a captured invocation with body, as an SDK does before its
// first step body, and returns the status and the body of the answer.
func askCurrent(t *testing.T, c captured, body string) (int, string) {
	t.Helper()
	var req protocol.InvocationRequest
	require.NoError(t, json.Unmarshal(c.body, &req))
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, req.Checkpoint.URL+"/current", strings.NewReader(body))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

// TestCapturedInvocationInFlight sends a signed invocation, captured on its way to a
// function, to a fresh process of the app while the invocation it copies is still the
// run's current one: the gateway answers yes to one process's nonce only, so exactly one
// of the two runs the step body, whichever asks first.
func TestCapturedInvocationInFlight(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)

	// deploy serves function name in a process that holds its first invocation at before
	// (outside the step, before the question) and inside (in the step body), behind a
	// proxy that captures what the gateway sends, and returns the proxy, the count of the
	// step body's runs across processes, and a function that starts a fresh process of
	// the app (no gates, an empty replay memory) and returns its URL.
	deploy := func(t *testing.T, name string, before, inside *gate) (*capturing, *atomic.Int32, func() string) {
		var charges atomic.Int32
		newApp := func(before, inside *gate) *functions.App {
			app := s.NewRequestApp()
			functions.Register(app, name, func(ctx context.Context, _ struct{}) (string, error) {
				before.wait(ctx)
				return step.Run(ctx, "charge", func(ctx context.Context) (string, error) {
					charges.Add(1)
					inside.wait(ctx)
					return "ch_1", nil
				})
			}, functions.InvocationBackoff(time.Millisecond, 2*time.Millisecond))
			return app
		}
		proxy := &capturing{h: newApp(before, inside), by: map[string][]captured{}}
		s.Sync(t, s.ServeApp(t, proxy))
		// Opened before the server closes (cleanups run last first), so that a test
		// that fails does not leave the function waiting for its timeout.
		for _, g := range []*gate{before, inside} {
			if g != nil {
				t.Cleanup(g.open)
			}
		}
		return proxy, &charges, func() string { return s.ServeApp(t, newApp(nil, nil)) }
	}
	start := func(t *testing.T, name string) string {
		resp := startRun(t, c, name, `{}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		return resp.JSON202.ID
	}
	result := func(t *testing.T, id string) protocol.RunResult {
		resp, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		return *resp.JSON200
	}

	t.Run("WhileTheOriginalRunsItsStep", func(t *testing.T) {
		t.Parallel()
		inside := newGate()
		proxy, charges, fresh := deploy(t, "inflight.blocked", nil, inside)
		id := start(t, "inflight.blocked")
		inside.reachedWithin(t, 30*time.Second, "its step body")
		copied := proxy.first(t, "/inflight.blocked")

		// The original asked and runs its step body: the copy, in another process, is
		// refused the run and runs nothing.
		a := sendAgain(t, fresh()+"inflight.blocked", copied)
		require.Equal(t, protocol.AnswerStatusFailed, a.Status)
		require.Equal(t, "superseded", a.Error.Type, a.Error.Message)
		require.Contains(t, a.Error.Message, "another process claimed it first")
		require.EqualValues(t, 1, charges.Load(), "the copy ran no step body")

		inside.open()
		r := result(t, id)
		require.Equal(t, protocol.RunStatusCompleted, r.Status)
		require.JSONEq(t, `"ch_1"`, string(*r.Output))
		require.EqualValues(t, 1, charges.Load(), "the charge ran once")
		got := getRun(t, c, id)
		require.Equal(t, 1, got.Invocations)
		require.Zero(t, got.FailedInvocations)
	})

	t.Run("TheCopyAsksFirst", func(t *testing.T) {
		t.Parallel()
		before := newGate()
		proxy, charges, fresh := deploy(t, "inflight.first", before, nil)
		id := start(t, "inflight.first")
		before.reachedWithin(t, 30*time.Second, "its first step")
		copied := proxy.first(t, "/inflight.first")

		// The copy claims the invocation first, runs the step body and journals it (its
		// token is the original's); its answer goes to whoever sent it.
		a := sendAgain(t, fresh()+"inflight.first", copied)
		require.Equal(t, protocol.AnswerStatusCompleted, a.Status)
		require.EqualValues(t, 1, charges.Load())

		// The original is refused the run: it runs nothing and answers superseded, which
		// the gateway takes as a failed invocation; the next one replays the charge.
		before.open()
		r := result(t, id)
		require.Equal(t, protocol.RunStatusCompleted, r.Status)
		require.JSONEq(t, `"ch_1"`, string(*r.Output))
		require.EqualValues(t, 1, charges.Load(), "exactly one of the two ran the step body")
		got := getRun(t, c, id)
		require.Equal(t, 2, got.Invocations)
		require.Equal(t, 1, got.FailedInvocations, "the original's invocation failed, superseded")
	})

	t.Run("OneNonceClaimsTheInvocation", func(t *testing.T) {
		t.Parallel()
		before := newGate()
		proxy, charges, _ := deploy(t, "inflight.nonce", before, nil)
		id := start(t, "inflight.nonce")
		before.reachedWithin(t, 30*time.Second, "its first step")
		copied := proxy.first(t, "/inflight.nonce")

		nonce := strings.Repeat("0123456789abcdef", 2)
		for range 2 { // the same nonce again: a retried question, parallel steps
			code, body := askCurrent(t, copied, `{"nonce":"`+nonce+`"}`)
			require.Equal(t, http.StatusOK, code, body)
			require.JSONEq(t, `{"run_id":"`+id+`"}`, body)
		}
		code, body := askCurrent(t, copied, `{"nonce":"`+strings.Repeat("f", 32)+`"}`)
		require.Equal(t, http.StatusConflict, code, body)
		require.Contains(t, body, `"type":"superseded"`)
		for _, bad := range []string{
			``, `{}`, `{"nonce":""}`, `{"nonce":"` + strings.Repeat("a", 31) + `"}`, `{"nonce":"` + strings.Repeat("a", 33) + `"}`,
			`{"nonce":"` + strings.ToUpper(nonce) + `"}`, `{"nonce":"` + strings.Repeat("g", 32) + `"}`, `{"nonce":` + strings.Repeat("1", 32) + `}`,
		} {
			code, body := askCurrent(t, copied, bad)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", bad, body)
			if bad != `` && !strings.HasPrefix(bad, `{"nonce":1`) {
				require.Contains(t, body, "nonce must be 32 lowercase hex digits", bad)
			}
		}

		// The original's own nonce is refused: it runs nothing, and its next invocation,
		// claimed afresh (the claim cleared the nonce), runs the step body.
		before.open()
		r := result(t, id)
		require.Equal(t, protocol.RunStatusCompleted, r.Status, "%+v", r.Error)
		require.EqualValues(t, 1, charges.Load())
		got := getRun(t, c, id)
		require.Equal(t, 2, got.Invocations)
	})
}
