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

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/signature"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/stack"
	"github.com/stepgate/stepgate/protocol"
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
		app := s.NewApp()
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
		// serve.
		one := 1
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "pay.other", protocol.FunctionRegistration{
			URL: appURL + "pay.charge", Config: &protocol.FunctionConfig{Retries: &protocol.RetryPolicy{MaxAttempts: &one}},
		})
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
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, nil)
		require.NoError(t, err)
		r.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
		require.Contains(t, string(body), "invocation token is for another run")
	})
}
