package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestListRunCallbacks: GET /v1/runs/{id}/callbacks gives a caller with runs:manage the
// whole URLs of a run's open callbacks, which resolve them when POSTed to; a viewer is
// refused (403 naming the permission), another tenant finds no run (404), and a
// callback resolved is listed no more.
func TestListRunCallbacks(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	manager := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	app := s.NewApp()
	// approve makes two callbacks and waits for the first, then the second.
	functions.Register(app, "approve", func(ctx context.Context, _ struct{}) ([]bool, error) {
		first, err := step.Callback[approval](ctx, "legal", step.Timeout(time.Hour))
		if err != nil {
			return nil, err
		}
		second, err := step.Callback[approval](ctx, "finance", step.Timeout(time.Hour))
		if err != nil {
			return nil, err
		}
		a, err := first.Result().Get()
		if err != nil {
			return nil, err
		}
		b, err := second.Result().Get()
		if err != nil {
			return nil, err
		}
		return []bool{a.OK, b.OK}, nil
	})
	synced, err := manager.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	id := startAsync(t, manager, "approve", `{}`)
	run := waitingForCallbackOnly(t, manager, id)
	require.Equal(t, "legal", run.Awaiting.Name)

	list := func() protocol.RunCallbackList {
		t.Helper()
		resp, err := manager.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		return *resp.JSON200
	}
	got := list()
	require.Equal(t, id, got.RunID)
	require.False(t, got.More)
	require.Len(t, got.Callbacks, 2)
	legal, finance := got.Callbacks[0], got.Callbacks[1]
	require.Equal(t, []string{"legal", "finance"}, []string{legal.Name, finance.Name})
	require.Equal(t, []int{1, 2}, []int{legal.Seq, finance.Seq})
	require.True(t, *legal.Awaited)
	require.False(t, *finance.Awaited)
	for _, cb := range got.Callbacks {
		require.True(t, strings.HasPrefix(cb.URL, s.URL+"/v1/callbacks/"), cb.URL)
		require.Len(t, strings.TrimPrefix(cb.URL, s.URL+"/v1/callbacks/"), 43, "the token, in clear")
		require.WithinDuration(t, time.Now().Add(time.Hour), cb.ExpiresAt, 5*time.Minute)
	}

	t.Run("AViewerIsRefused", func(t *testing.T) {
		resp, err := viewer.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "needs the runs:manage permission")
		require.NotContains(t, string(resp.Body), legal.URL)
	})

	t.Run("AnotherTenantFindsNoRun", func(t *testing.T) {
		resp, err := other.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		require.NotContains(t, string(resp.Body), "/v1/callbacks/")
	})

	t.Run("TheURLsResolveTheCallbacks", func(t *testing.T) {
		status, body := postNoAuth(t, finance.URL, `{"ok":true}`)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, []string{"legal"}, names(list().Callbacks), "a resolved callback is open no more")
		status, body = postNoAuth(t, legal.URL, `{"ok":true}`)
		require.Equal(t, http.StatusOK, status, body)
		done := stack.AwaitStatus(t, manager, id, protocol.RunStatusCompleted)
		require.JSONEq(t, `[true,true]`, string(*done.Output))
		require.Empty(t, list().Callbacks)
	})
}

func names(cbs []protocol.RunCallback) []string {
	out := make([]string, 0, len(cbs))
	for _, cb := range cbs {
		out = append(out, cb.Name)
	}
	return out
}
