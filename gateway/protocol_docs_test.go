package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// signedRequest is a request the gateway made to an app.
type signedRequest struct {
	method, path, header, body string
}

// recorder records the requests an app gets, then serves them.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []signedRequest
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.reqs = append(r.reqs, signedRequest{req.Method, req.URL.Path, req.Header.Get(signature.Header), string(body)})
	r.mu.Unlock()
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	r.next.ServeHTTP(w, req)
}

func (r *recorder) requests(method string) []signedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []signedRequest
	for _, q := range r.reqs {
		if q.method == method {
			out = append(out, q)
		}
	}
	return out
}

// TestSignedRequestsRepeatAsDocumented checks what docs/protocol.md ("How functions verify the
// gateway") and openapi.yaml say of repeated signed requests: two manifest syncs of one
// tenant within one second carry the same signed message, byte for byte, and the Go
// SDK answers both; each invocation of a run, a retry included, is a new body with a
// new signature.
func TestSignedRequestsRepeatAsDocumented(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	var mu sync.Mutex
	calls := 0
	functions.Register(app, "twice.failing", func(ctx context.Context, _ struct{}) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls <= 2 {
			return "", errors.New("not yet") // a failed invocation, retried
		}
		return "done", nil
	}, functions.InvocationAttempts(3), functions.InvocationBackoff(time.Millisecond, time.Millisecond))
	rec := &recorder{next: app}
	url := s.ServeApp(t, rec)

	t.Run("ManifestRepeats", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			s.Sync(t, url) // fails the test unless the app answered 200
			gets := rec.requests(http.MethodGet)
			if n := len(gets); n >= 2 {
				a, b := gets[n-2], gets[n-1]
				ta, _ := signature.Parse(a.header)
				tb, _ := signature.Parse(b.header)
				if ta.T == tb.T {
					require.Equal(t, a.header, b.header, "two syncs in one second")
					require.Empty(t, a.body)
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("no two syncs within one second in 30s")
			}
		}
	})

	t.Run("InvocationsNeverRepeat", func(t *testing.T) {
		out := mustComplete(t, s.Client(t, s.Token), "twice.failing", `{}`)
		require.JSONEq(t, `"done"`, string(*out.Output))
		posts := rec.requests(http.MethodPost)
		require.Len(t, posts, 3, "two failed invocations and the one that completed")
		headers, bodies := map[string]bool{}, map[string]bool{}
		for _, p := range posts {
			headers[p.header], bodies[p.body] = true, true
		}
		require.Len(t, headers, 3, "each invocation has a signature of its own")
		require.Len(t, bodies, 3, "each invocation has a body of its own")
	})
}

// TestCheckpointWithAnotherRunsToken checks the 401 docs/protocol.md and openapi.yaml
// document for the checkpoint (and its stream) called with the token of another run's
// invocation: nothing is journaled or written.
func TestCheckpointWithAnotherRunsToken(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	mine, other := claimRun(t, s), claimRun(t, s)
	for suffix, body := range map[string]string{
		"":        `{"seq":1,"kind":"step","name":"steal","output":1}`,
		"/stream": `{"key":"k","seq":1,"index":0,"chunks":["a"]}`,
	} {
		status, out := other.post(t, s, suffix, mine.token, body)
		require.Equal(t, http.StatusUnauthorized, status, "checkpoint%s: %v", suffix, out)
		require.Equal(t, "invocation token is for another run", out["detail"], "checkpoint%s", suffix)
	}
	run := getRun(t, s.Client(t, s.Token), other.runID)
	require.Empty(t, run.Journal)
	other.mustPost(t, s, "", `{"seq":1,"kind":"step","name":"mine","output":1}`) // its own token works
}

// TestAWaitSeesOnlyEventsAfterItsInvocation checks the top of docs/events.md:
// an event stored before the invocation that reaches a wait began does not
// resume it, even though the run was started after the event; a message sent before
// the receive is kept for it.
func TestAWaitSeesOnlyEventsAfterItsInvocation(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "early.wait", func(ctx context.Context, _ struct{}) (bool, error) {
		_, err := step.WaitForEvent[any](ctx, "paid", "early.paid", step.Timeout(time.Second)).Get()
		return timedOut(err)
	})
	functions.Register(app, "early.receive", func(ctx context.Context, _ struct{}) (bool, error) {
		_, err := step.Receive[string](ctx, "note", step.Timeout(time.Minute)).Get()
		return timedOut(err)
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)

	mustSendEvent(t, c, protocol.EventSend{Name: "early.paid", Data: ptr(protocol.AnyJSON(`{}`))})
	res := mustResult(t, c, startAsync(t, c, "early.wait", `{}`))
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `true`, string(*res.Output), "the event stored before the run's invocation did not resume its wait")

	// A message sent right after the start, before the run reached its receive, is kept.
	id := startAsync(t, c, "early.receive", `{}`)
	sent, err := c.SendMessageWithResponse(t.Context(), id, protocol.MessageSend{Topic: "note", Data: ptr(protocol.AnyJSON(`"hi"`))})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, sent.StatusCode(), string(sent.Body))
	res = mustResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `false`, string(*res.Output), "the message was kept for the receive")
}
