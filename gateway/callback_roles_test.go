package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestCallbackByNameRespectsInvokeRoles: resolving or rejecting a run's callback by its
// name, and listing its callbacks' URLs, needs what resuming it by an event or a message
// needs: a role of the function's invoke_roles or resume_roles (or admin), besides
// runs:manage. An operator (runs:manage, not billing) gets a 403 naming both lists and
// the caller's roles, and the run still waits; another tenant's admin finds no run;
// the callback's URL stays a bearer capability, which anyone holding it resolves.
func TestCallbackByNameRespectsInvokeRoles(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	boss := s.Client(t, s.NewToken(t, auth.Identity{Subject: "boss", Tenant: "t1", Roles: []string{"developer", "billing"}}))
	operator := s.Client(t, s.NewToken(t, auth.Identity{Subject: "opal", Tenant: "t1", Roles: []string{"operator"}}))
	hook := s.Client(t, s.NewToken(t, auth.Identity{Subject: "hook", Tenant: "t1", Roles: []string{"operator", "webhooks"}}))
	admin := s.Client(t, s.NewToken(t, auth.Identity{Subject: "root", Tenant: "t1", Roles: []string{"admin"}}))
	mallory := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	app := s.NewApp()
	// refund makes a callback, hands its URL out in a step, and waits for it.
	functions.Register(app, "refund", func(ctx context.Context, _ struct{}) (approvalOutcome, error) {
		cb, err := step.Callback[approval](ctx, "approval", step.Timeout(time.Hour))
		if err != nil {
			return approvalOutcome{}, err
		}
		if _, err := step.Run(ctx, "notify", func(context.Context) (string, error) { return cb.URL, nil }); err != nil {
			return approvalOutcome{}, err
		}
		return approvalOf(cb)
	}, functions.InvokeRoles("billing"), functions.ResumeRoles("webhooks"))
	synced, err := admin.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	// forbidden checks that c may neither resolve, nor reject, nor list run id's
	// callbacks, and that the 403s say why.
	forbidden := func(t *testing.T, c *protocol.ClientWithResponses, id, url, roles string) {
		t.Helper()
		resolved, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		rejected, err := c.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "no"})
		require.NoError(t, err)
		listed, err := c.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		for _, r := range []struct {
			code int
			body []byte
		}{{resolved.StatusCode(), resolved.Body}, {rejected.StatusCode(), rejected.Body}, {listed.StatusCode(), listed.Body}} {
			require.Equal(t, http.StatusForbidden, r.code, string(r.body))
			require.Contains(t, string(r.body), "invoke_roles: billing")
			require.Contains(t, string(r.body), "resume_roles (webhooks)")
			require.Contains(t, string(r.body), "the caller's roles ("+roles+")")
			require.NotContains(t, string(r.body), url)
		}
		run := getRun(t, boss, id)
		require.Equal(t, protocol.RunStatusSuspended, run.Status, "the run still waits")
		require.Equal(t, protocol.AwaitingKindAwaitCallback, run.Awaiting.Kind)
	}
	// notFound checks that c finds no run id to resolve, reject or list.
	notFound := func(t *testing.T, c *protocol.ClientWithResponses, id string) {
		t.Helper()
		resolved, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resolved.StatusCode(), string(resolved.Body))
		rejected, err := c.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "no"})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, rejected.StatusCode(), string(rejected.Body))
		listed, err := c.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, listed.StatusCode(), string(listed.Body))
	}
	resolveAs := func(t *testing.T, c *protocol.ClientWithResponses, id, subject string) {
		t.Helper()
		resp, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, subject, resp.JSON200.ResolvedBy.Subject)
		out := mustResult(t, boss, id)
		require.JSONEq(t, `{"ok":true,"timed_out":false,"rejected":"","resolver":"identity","by":"`+subject+`"}`, string(*out.Output))
	}

	t.Run("AnOperatorWithoutTheRolesIsRefused", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "refund", `{}`)
		_, url := waitingForCallback(t, boss, id)
		forbidden(t, operator, id, url, "operator")
		// Even for a callback name the run has not: the run's roles are checked first.
		resp, err := operator.ResolveRunCallbackWithResponse(t.Context(), id, "nope", protocol.AnyJSON(`{}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		resolveAs(t, boss, id, "boss")
		// And once the run has finished.
		rej, err := operator.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "no"})
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, rej.StatusCode(), string(rej.Body))
	})

	t.Run("AnotherTenantsAdminFindsNoRun", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "refund", `{}`)
		waitingForCallback(t, boss, id)
		notFound(t, mallory, id)
		resolveAs(t, boss, id, "boss")
	})

	t.Run("ResumeRolesResolve", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "refund", `{}`)
		waitingForCallback(t, boss, id)
		listed, err := hook.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, listed.StatusCode(), string(listed.Body))
		require.Len(t, listed.JSON200.Callbacks, 1)
		resolveAs(t, hook, id, "hook")
	})

	t.Run("AnAdminOfTheTenantResolves", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "refund", `{}`)
		waitingForCallback(t, boss, id)
		resolveAs(t, admin, id, "root")
	})

	t.Run("TheURLIsStillABearerCapability", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "refund", `{}`)
		_, url := waitingForCallback(t, boss, id)
		forbidden(t, operator, id, url, "operator")
		code, body := postNoAuth(t, url, `{"ok":true}`)
		require.Equal(t, http.StatusOK, code, body)
		out := mustResult(t, boss, id)
		require.JSONEq(t, `{"ok":true,"timed_out":false,"rejected":"","resolver":"token","by":""}`, string(*out.Output))
	})
}
