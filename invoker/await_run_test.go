package invoker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// awaited is what the watcher functions return of the run they awaited.
type awaited struct {
	Output    json.RawMessage `json:"output,omitempty"`
	ErrorType string          `json:"error_type,omitempty"`
	TimedOut  bool            `json:"timed_out,omitempty"`
	Index     int             `json:"index"`
}

type watch struct {
	RunID   string `json:"run_id"`
	Timeout string `json:"timeout,omitempty"`
}

func outcome(out json.RawMessage, err error) (awaited, error) {
	var se *step.Error
	switch {
	case err == nil:
		return awaited{Output: out}, nil
	case errors.Is(err, step.ErrTimedOut):
		return awaited{TimedOut: true}, nil
	case errors.As(err, &se):
		return awaited{ErrorType: se.Type}, nil
	}
	return awaited{}, err
}

// awaitRunApp registers, on a new app of s: worker, which ends with the message it
// receives on "go" (or fails with it, when it is {"fail": true}); watcher, which
// awaits the run its input names (step.AwaitRun) and returns what came; first, which
// waits for the first of that run's end and a message on "stop" (step.WaitFirst); and
// self, which awaits its own end. It returns the app's URL.
func awaitRunApp(t *testing.T, s *stack.Stack) string {
	app := s.NewApp()
	functions.Register(app, "worker", func(ctx context.Context, _ struct{}) (json.RawMessage, error) {
		m, err := step.Receive[json.RawMessage](ctx, "go").Get()
		if err != nil {
			return nil, err
		}
		if strings.Contains(string(m.Data), `"fail"`) {
			return nil, step.NonRetryable(&step.Error{Type: "worker_failed", Message: "asked to fail"})
		}
		return m.Data, nil
	})
	functions.Register(app, "watcher", func(ctx context.Context, in watch) (awaited, error) {
		var opts []step.Option
		if in.Timeout != "" {
			d, _ := time.ParseDuration(in.Timeout)
			opts = append(opts, step.Timeout(d))
		}
		return outcome(step.AwaitRun[json.RawMessage](ctx, "worker", in.RunID, opts...).Get())
	})
	functions.Register(app, "first", func(ctx context.Context, in watch) (awaited, error) {
		end := step.AwaitRun[json.RawMessage](ctx, "worker", in.RunID)
		stop := step.Receive[json.RawMessage](ctx, "stop")
		i, err := step.WaitFirst(ctx, "first", end, stop)
		if err != nil {
			return awaited{}, err
		}
		if i == 1 {
			return awaited{Index: 1}, nil
		}
		a, err := outcome(end.Get())
		return a, err
	})
	functions.Register(app, "self", func(ctx context.Context, _ struct{}) (awaited, error) {
		return outcome(step.AwaitRun[json.RawMessage](ctx, "me", functions.RunFrom(ctx).ID).Get())
	})
	return s.ServeApp(t, app)
}

func sendMessage(t *testing.T, c *protocol.ClientWithResponses, runID, topic, data string) {
	t.Helper()
	resp, err := c.SendMessageWithResponse(t.Context(), runID, protocol.SendMessageJSONRequestBody{Topic: topic, Data: ptr(protocol.AnyJSON(data))})
	require.NoError(t, err)
	require.Less(t, resp.StatusCode(), 300, string(resp.Body))
}

func awaitStatus(t *testing.T, c *protocol.ClientWithResponses, id string, want protocol.RunStatus) protocol.RunDetail {
	t.Helper()
	var got protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got = getRun(t, c, id)
		assert.Equal(ct, want, got.Status)
	}, 30*time.Second, 5*time.Millisecond)
	return got
}

func resultOf(t *testing.T, c *protocol.ClientWithResponses, id string) awaited {
	t.Helper()
	res := awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
	var a awaited
	require.NoError(t, json.Unmarshal(*res.Output, &a))
	return a
}

// TestAwaitRun: a run waits for another run's end, any run of its tenant: it resumes in
// the transaction of that end (completed, failed or cancelled), at once when the run has
// ended already, with not_found for a run of no tenant of its own, forbidden for an
// identity without runs:read, or when its timeout passes; it may be one of WaitFirst's
// futures; and a run awaiting itself fails.
func TestAwaitRun(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	url := awaitRunApp(t, s)
	s.Sync(t, url)
	c := s.Client(t, s.Token)
	watchOf := func(c *protocol.ClientWithResponses, fn string, w watch) string {
		raw, err := json.Marshal(w)
		require.NoError(t, err)
		return startRunAsync(t, c, fn, string(raw)).ID
	}

	t.Run("ResumesWhenTheRunCompletes", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		watcher := watchOf(c, "watcher", watch{RunID: worker})
		d := awaitStatus(t, c, watcher, protocol.RunStatusSuspended)
		require.NotNil(t, d.Awaiting)
		require.Equal(t, protocol.AwaitingKindAwaitRun, d.Awaiting.Kind)
		require.Equal(t, worker, *d.Awaiting.RunID, "the run shows which run it awaits")
		sendMessage(t, c, worker, "go", `{"n": 7}`)
		require.JSONEq(t, `{"n": 7}`, string(resultOf(t, c, watcher).Output))
		entry := getRun(t, c, watcher).Journal
		require.NotEmpty(t, entry)
		last := entry[len(entry)-1]
		require.Equal(t, protocol.EntryKindAwaitRun, last.Kind)
		require.JSONEq(t, `{"run": {"id": "`+worker+`", "status": "completed", "output": {"n": 7}}}`, string(*last.Output))
	})
	t.Run("AFailedRunIsItsError", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		watcher := watchOf(c, "watcher", watch{RunID: worker})
		awaitStatus(t, c, watcher, protocol.RunStatusSuspended)
		sendMessage(t, c, worker, "go", `{"fail": true}`)
		require.Equal(t, "worker_failed", resultOf(t, c, watcher).ErrorType)
	})
	t.Run("ACancelledRunIsCancelled", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		watcher := watchOf(c, "watcher", watch{RunID: worker})
		awaitStatus(t, c, watcher, protocol.RunStatusSuspended)
		resp, err := c.CancelRunWithResponse(t.Context(), worker)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, "cancelled", resultOf(t, c, watcher).ErrorType)
	})
	t.Run("ARunThatEndedIsJournaledAtOnce", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		sendMessage(t, c, worker, "go", `"done"`)
		awaitResult(t, c, worker)
		watcher := watchOf(c, "watcher", watch{RunID: worker})
		require.JSONEq(t, `"done"`, string(resultOf(t, c, watcher).Output))
	})
	t.Run("AnUnknownRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		watcher := watchOf(c, "watcher", watch{RunID: "0190a0c1-0000-7000-8000-000000000000"})
		require.Equal(t, step.ErrorTypeNotFound, resultOf(t, c, watcher).ErrorType)
	})
	t.Run("ARunOfAnotherTenantIsNotFound", func(t *testing.T) {
		t.Parallel()
		other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "other-tenant", Roles: []string{"admin"}}))
		resp, err := other.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON200, string(resp.Body))
		worker := startRunAsync(t, c, "worker", `{}`).ID // the default tenant's
		watcher := watchOf(other, "watcher", watch{RunID: worker})
		require.Equal(t, step.ErrorTypeNotFound, resultOf(t, other, watcher).ErrorType)
		sendMessage(t, c, worker, "go", `1`)
		awaitResult(t, c, worker)
		require.Equal(t, step.ErrorTypeNotFound, resultOf(t, other, watcher).ErrorType, "its end reached no run of the other tenant")
	})
	t.Run("AnIdentityWithoutRunsReadIsForbidden", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		// runs:invoke, without runs:read: a custom role, as an operator may define one.
		starter := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bot", Tenant: auth.DefaultTenant, Roles: []string{"runs:invoke"}}))
		watcher := watchOf(starter, "watcher", watch{RunID: worker})
		require.Equal(t, step.ErrorTypeForbidden, resultOf(t, c, watcher).ErrorType)
	})
	t.Run("TimesOut", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		watcher := watchOf(c, "watcher", watch{RunID: worker, Timeout: "1s"})
		require.True(t, resultOf(t, c, watcher).TimedOut)
		sendMessage(t, c, worker, "go", `1`)
		awaitResult(t, c, worker)
		require.True(t, resultOf(t, c, watcher).TimedOut, "a late end changes nothing")
	})
	t.Run("InWaitFirst", func(t *testing.T) {
		t.Parallel()
		worker := startRunAsync(t, c, "worker", `{}`).ID
		first := watchOf(c, "first", watch{RunID: worker})
		awaitStatus(t, c, first, protocol.RunStatusSuspended)
		sendMessage(t, c, worker, "go", `"won"`)
		got := resultOf(t, c, first)
		require.Equal(t, 0, got.Index)
		require.JSONEq(t, `"won"`, string(got.Output))

		other := startRunAsync(t, c, "worker", `{}`).ID
		stopped := watchOf(c, "first", watch{RunID: other})
		awaitStatus(t, c, stopped, protocol.RunStatusSuspended)
		sendMessage(t, c, stopped, "stop", `1`)
		require.Equal(t, 1, resultOf(t, c, stopped).Index)
		sendMessage(t, c, other, "go", `1`)
		awaitResult(t, c, other)
		require.Equal(t, 1, resultOf(t, c, stopped).Index, "the run's end after another alternative came changes nothing")
	})
	t.Run("ARunMayNotAwaitItself", func(t *testing.T) {
		t.Parallel()
		id := startRunAsync(t, c, "self", `{}`).ID
		res := awaitResult(t, c, id)
		require.Equal(t, protocol.RunStatusFailed, res.Status)
		require.Equal(t, "bad_answer", res.Error.Type)
		require.Contains(t, res.Error.Message, "awaits the run itself")
	})
}
