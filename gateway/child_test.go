package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// invocationSeen is what a function saw of its invocation.
type invocationSeen struct {
	Identity functions.Identity `json:"identity"`
	ParentID string             `json:"parent_id"`
}

// childError is how a parent reports the error of a child it handled.
type childError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// invokeAsync starts a run of name without waiting, then attaches to its result for up
// to 30s, and logs how long that took.
func invokeAsync(t *testing.T, c *protocol.ClientWithResponses, name, input string) protocol.RunResult {
	t.Helper()
	start := startRun(t, c, name, input, &protocol.StartRunParams{})
	require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
	began := time.Now()
	resp, err := c.GetRunResultWithResponse(t.Context(), start.JSON202.ID, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), "the run did not finish in 30s: %s", resp.Body)
	t.Logf("%s finished %s after it was started", name, time.Since(began).Round(time.Millisecond))
	return *resp.JSON200
}

// childOf returns the one run of function whose parent is parentID.
func childOf(t *testing.T, c *protocol.ClientWithResponses, function, parentID string) protocol.Run {
	t.Helper()
	resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: &function})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	var children []protocol.Run
	for _, r := range resp.JSON200.Runs {
		if r.ParentID != nil && *r.ParentID == parentID {
			children = append(children, r)
		}
	}
	require.Len(t, children, 1, "one %s run is a child of %s", function, parentID)
	return children[0]
}

// TestChildRuns invokes parents that invoke children, through a real gateway, as a
// developer of tenant t1 whose token carries an allow-listed email claim.
func TestChildRuns(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Auth: auth.Config{IdentityClaims: []string{"email"}}})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}, Claims: map[string]any{"email": "alice@example.com"}}
	c := s.Client(t, s.NewToken(t, alice))
	wantIdentity := protocol.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"},
		Claims: map[string]any{"email": "alice@example.com"}}

	var mu sync.Mutex
	whoami := map[string]invocationSeen{} // run id -> what whoami saw
	app := s.NewApp()
	examples.Register(app)
	functions.Register(app, "whoami", func(ctx context.Context, _ struct{}) (invocationSeen, error) {
		v := invocationSeen{Identity: functions.IdentityFrom(ctx), ParentID: functions.RunFrom(ctx).ParentID}
		mu.Lock()
		whoami[functions.RunFrom(ctx).ID] = v
		mu.Unlock()
		return v, nil
	})
	functions.Register(app, "parent.whoami", func(ctx context.Context, _ struct{}) (map[string]invocationSeen, error) {
		child, err := step.Invoke[invocationSeen](ctx, "ask", "whoami", nil).Get()
		if err != nil {
			return nil, err
		}
		return map[string]invocationSeen{"parent": {Identity: functions.IdentityFrom(ctx)}, "child": child}, nil
	})
	// handles invokes function with input and answers the error it got, handled.
	handles := func(function, input string) func(ctx context.Context, _ struct{}) (childError, error) {
		return func(ctx context.Context, _ struct{}) (childError, error) {
			_, err := step.Invoke[any](ctx, "call", function, protocol.AnyJSON(input)).Get()
			if se, ok := errors.AsType[*step.Error](err); ok {
				return step.Run(ctx, "handle", func(context.Context) (childError, error) {
					return childError{Type: se.Type, Message: se.Message}, nil
				})
			}
			return childError{}, step.NonRetryable(errors.New("the child did not fail"))
		}
	}
	functions.Register(app, "parent.flaky", handles("flaky", `{"fail_times":5}`))
	functions.Register(app, "parent.unknown", handles("nope", `{}`))
	functions.Register(app, "broken", func(ctx context.Context, _ struct{}) (int, error) {
		return 0, errors.New("always down") // HTTP 500: a failed invocation, retried
	}, functions.InvocationAttempts(2), functions.InvocationBackoff(time.Millisecond, 10*time.Millisecond))
	functions.Register(app, "parent.broken", handles("broken", `{}`))
	functions.Register(app, "parent.sleeper", handles("orders.checkout", `{"sleep_ms":600000}`))
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("FulfilReturnsTheChildsShipment", func(t *testing.T) {
		t.Parallel()
		res := invokeAsync(t, c, "orders.fulfil", `{"order_id":"o-42","amount":500}`)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		require.JSONEq(t, `{"tracking":"trk_o-42"}`, string(*res.Output))

		parent := getRun(t, c, res.ID)
		require.Equal(t, wantIdentity, parent.Identity)
		require.Equal(t, 2, parent.Invocations, "one invocation before the child, one after")
		require.Len(t, parent.Journal, 1)
		e := parent.Journal[0]
		require.Equal(t, protocol.EntryKindInvoke, e.Kind)
		require.Equal(t, "checkout", e.Name)
		require.Nil(t, e.Error)

		child := getRun(t, c, childOf(t, c, "orders.checkout", res.ID).ID)
		require.Equal(t, protocol.RunStatusCompleted, child.Status)
		require.Equal(t, res.ID, *child.ParentID)
		require.Equal(t, 1, *child.ParentSeq)
		require.Equal(t, "checkout", *child.ParentName)
		require.JSONEq(t, `{"order_id":"o-42","amount":500,"sleep_ms":0}`, string(*child.Input))
		require.Equal(t, wantIdentity, child.Identity, "the child runs as the parent's identity")
		require.JSONEq(t, string(*child.Output), string(*e.Output), "the parent's entry holds the child's output")
		require.Equal(t, child.CreatedAt, *e.StartedAt)
		require.False(t, e.FinishedAt.Before(*child.FinishedAt))
	})

	t.Run("TheChildSeesTheParentsIdentity", func(t *testing.T) {
		t.Parallel()
		res := invokeAsync(t, c, "parent.whoami", `{}`)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		child := childOf(t, c, "whoami", res.ID)
		mu.Lock()
		got, ok := whoami[child.ID]
		mu.Unlock()
		require.True(t, ok, "whoami ran as the child")
		require.Equal(t, functions.Identity(wantIdentity), got.Identity, "the identity the function saw")
		require.Equal(t, res.ID, got.ParentID, "and its parent")
		require.Equal(t, wantIdentity, child.Identity)

		var out map[string]invocationSeen
		require.NoError(t, json.Unmarshal(*res.Output, &out))
		require.Equal(t, out["parent"].Identity, out["child"].Identity)
	})

	t.Run("AFailedChildIsAnErrorTheParentHandles", func(t *testing.T) {
		t.Parallel()
		res := invokeAsync(t, c, "parent.flaky", `{}`)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		var got childError
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		require.Equal(t, childError{Type: "step_failed", Message: "attempt 3 of 5 planned failures: flaky by design"}, got)

		parent := getRun(t, c, res.ID)
		require.Len(t, parent.Journal, 2)
		require.Equal(t, protocol.EntryKindInvoke, parent.Journal[0].Kind)
		require.Equal(t, "step_failed", parent.Journal[0].Error.Type)
		require.Nil(t, parent.Journal[0].Output)
		child := childOf(t, c, "flaky", res.ID)
		require.Equal(t, protocol.RunStatusFailed, child.Status)
	})

	t.Run("AChildOutOfInvocationAttemptsFailsTheParentsCall", func(t *testing.T) {
		t.Parallel()
		res := invokeAsync(t, c, "parent.broken", `{}`)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		var got childError
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		require.Equal(t, "http_status", got.Type)
		require.Contains(t, got.Message, "always down")
		require.Contains(t, got.Message, "giving up")
		child := getRun(t, c, childOf(t, c, "broken", res.ID).ID)
		require.Equal(t, protocol.RunStatusFailed, child.Status)
		require.Equal(t, 2, child.Invocations, "its function's max_attempts")
	})

	t.Run("AnUnknownFunctionIsNotFound", func(t *testing.T) {
		t.Parallel()
		// Waiting on the start: this gateway invokes the parent at once, and answers
		// once the parent's second invocation, after the not_found entry, completed it.
		start := startRun(t, c, "parent.unknown", `{}`, nil)
		require.Equal(t, http.StatusOK, start.StatusCode(), string(start.Body))
		res := *start.JSON200
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		var got childError
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		require.Equal(t, "not_found", got.Type)
		require.Contains(t, got.Message, "nope")
		parent := getRun(t, c, res.ID)
		require.Equal(t, "not_found", parent.Journal[0].Error.Type)
	})

	t.Run("ACancelledChildWakesItsParent", func(t *testing.T) {
		t.Parallel()
		start := startRun(t, c, "parent.sleeper", `{}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
		id := start.JSON202.ID
		var child protocol.Run
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("orders.checkout"), Status: ptr(protocol.RunStatusSuspended)})
			if !assert.NoError(ct, err) || !assert.NotNil(ct, resp.JSON200) {
				return
			}
			for _, r := range resp.JSON200.Runs {
				if r.ParentID != nil && *r.ParentID == id {
					child = r
					return
				}
			}
			ct.Errorf("no suspended child of %s yet", id)
		}, 10*time.Second, 5*time.Millisecond, "the child did not reach its sleep")

		cancel, err := c.CancelRunWithResponse(t.Context(), child.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
		began := time.Now()
		resp, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		t.Logf("the parent finished %s after its child was cancelled", time.Since(began).Round(time.Millisecond))
		var got childError
		require.NoError(t, json.Unmarshal(*resp.JSON200.Output, &got))
		require.Equal(t, childError{Type: "cancelled", Message: "cancelled by alice"}, got)
	})

	t.Run("ACancelledParentsChildIsCancelledWithIt", func(t *testing.T) {
		t.Parallel()
		start := startRun(t, c, "orders.fulfil", `{"sleep_ms":600000}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
		id := start.JSON202.ID
		stack.AwaitStatus(t, c, id, protocol.RunStatusSuspended)
		cancel, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))

		child := getRun(t, c, childOf(t, c, "orders.checkout", id).ID)
		require.Equal(t, protocol.RunStatusCancelled, child.Status)
		require.Equal(t, "cancelled with its parent run "+id+" by alice", child.Error.Message)
		parent := getRun(t, c, id)
		require.Equal(t, protocol.RunStatusCancelled, parent.Status)
		require.Empty(t, parent.Journal, "nothing is journaled in a cancelled parent")
	})
}
