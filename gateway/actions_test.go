package gateway_test

import (
	"context"
	"net/http"
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

// startAsync queues a run of name and returns its id.
func startAsync(t *testing.T, c *protocol.ClientWithResponses, name, input string) string {
	t.Helper()
	resp := startRun(t, c, name, input, &protocol.StartRunParams{})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return resp.JSON202.ID
}

// awaitJobsDone waits until no River invoke job of the run is pending, and returns how
// many it had.
func awaitJobsDone(t *testing.T, s *stack.Stack, runID string) int {
	t.Helper()
	var total, pending int
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := s.Pool.QueryRow(t.Context(), `
			SELECT count(*), count(*) FILTER (WHERE state NOT IN ('completed', 'discarded', 'cancelled'))
			FROM river_job WHERE kind = 'stepgate.invoke' AND args->>'run_id' = $1`, runID).Scan(&total, &pending)
		assert.NoError(ct, err)
		assert.Zero(ct, pending)
	}, 15*time.Second, 10*time.Millisecond)
	return total
}

func TestCancel(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))

	t.Run("SleepingRunIsCancelledAndNeverWakes", func(t *testing.T) {
		t.Parallel()
		// Long enough to cancel it asleep on a loaded machine under -race (300 ms was
		// not: the run woke and completed first), short enough to see the wake-up's job.
		id := startAsync(t, c, "orders.checkout", `{"sleep_ms":2000}`)
		stack.AwaitStatus(t, c, id, protocol.RunStatusSuspended)

		// A waiter attached before the cancellation is told at once.
		waited := make(chan *protocol.GetRunResultResponse, 1)
		go func() {
			res, _ := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
			waited <- res
		}()

		resp, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.RunStatusCancelled, resp.JSON200.Status)
		require.Equal(t, "cancelled", resp.JSON200.Error.Type)
		require.Contains(t, resp.JSON200.Error.Message, "tester", "names who cancelled")

		select {
		case res := <-waited:
			require.NotNil(t, res)
			require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
			require.Equal(t, protocol.RunStatusCancelled, res.JSON200.Status)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not told of the cancellation")
		}
		res, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode())
		require.Equal(t, protocol.RunStatusCancelled, res.JSON200.Status)
		run := getRun(t, c, id)
		require.NotNil(t, run.CancelledBy, "who cancelled is recorded on the run")
		require.Equal(t, "tester", run.CancelledBy.Subject)
		require.Equal(t, []string{"admin", stack.OperatorRole}, run.CancelledBy.Roles)

		// The wake-up job runs past the sleep and finds nothing to claim.
		require.GreaterOrEqual(t, awaitJobsDone(t, s, id), 2, "the start's job and the wake-up's")
		run = getRun(t, c, id)
		require.Equal(t, protocol.RunStatusCancelled, run.Status)
		require.Len(t, run.Journal, 3, "reserve, charge, the sleep; never ship")
		require.Equal(t, "cool-off", run.Journal[2].Name)
		require.Equal(t, 1, run.Invocations)
	})

	t.Run("FinishedRunIsAConflict", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "hello", `{}`)
		resp, err := c.CancelRunWithResponse(t.Context(), res.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.StatusCode())
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "already completed")
		require.Equal(t, protocol.RunStatusCompleted, getRun(t, c, res.ID).Status)
	})

	t.Run("OtherTenantsAndUnknownRunsAreNotFound", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.checkout", `{"sleep_ms":60000}`)
		for _, tc := range []struct {
			c  *protocol.ClientWithResponses
			id string
		}{{other, id}, {c, "01a22695-0000-7000-8000-00000000dead"}, {c, "not-a-uuid"}} {
			resp, err := tc.c.CancelRunWithResponse(t.Context(), tc.id)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		}
		require.NotEqual(t, protocol.RunStatusCancelled, getRun(t, c, id).Status)
		resp, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode())
	})
}

// TestCancelAbandonsALocalCall cancels a run whose function is in the middle of a long
// step, called by this gateway for a caller that waits: the call is abandoned, so the
// function sees its request end and the caller gets the cancellation at once.
func TestCancelAbandonsALocalCall(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	started, stopped := make(chan string, 1), make(chan struct{}, 1)
	app := s.NewApp()
	functions.Register(app, "blocker", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "block", func(ctx context.Context) (string, error) {
			started <- functions.RunFrom(ctx).ID
			select {
			case <-ctx.Done():
				stopped <- struct{}{}
				return "", ctx.Err()
			case <-time.After(30 * time.Second):
				return "done", nil
			}
		})
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)

	result := make(chan *protocol.StartRunResponse, 1)
	go func() {
		resp, _ := c.StartRunWithBodyWithResponse(t.Context(), "blocker", &protocol.StartRunParams{Wait: ptr("30s")}, "application/json", nil)
		result <- resp
	}()
	var id string
	select {
	case id = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the function was not called")
	}
	resp, err := c.CancelRunWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the function's request did not end")
	}
	select {
	case res := <-result:
		require.NotNil(t, res)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusCancelled, res.JSON200.Status)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting caller was not answered")
	}
	run := getRun(t, c, id)
	require.Equal(t, protocol.RunStatusCancelled, run.Status)
	require.Empty(t, run.Failures, "an abandoned call is not a failed attempt")
}

// TestCancelTellsOtherGateways waits for a run on one gateway and cancels it on another.
func TestCancelTellsOtherGateways(t *testing.T) {
	t.Parallel()
	a := stack.Start(t, stack.Options{})
	a.SyncExamples(t)
	b := stack.Start(t, stack.Options{DatabaseURL: a.Pool.Config().ConnString()})
	ca, cb := a.Client(t, a.Token), b.Client(t, b.Token)

	id := startAsync(t, ca, "orders.checkout", `{"sleep_ms":60000}`)
	stack.AwaitStatus(t, ca, id, protocol.RunStatusSuspended)
	waited := make(chan *protocol.GetRunResultResponse, 1)
	go func() {
		res, _ := ca.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
		waited <- res
	}()
	// The waiter's mark is set once it attached.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var notify bool
		assert.NoError(ct, a.Pool.QueryRow(t.Context(), `SELECT notify FROM stepgate.run WHERE id = $1`, id).Scan(&notify))
		assert.True(ct, notify)
	}, 10*time.Second, 5*time.Millisecond, "the waiter did not attach")
	resp, err := cb.CancelRunWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	select {
	case res := <-waited:
		require.NotNil(t, res)
		require.Equal(t, protocol.RunStatusCancelled, res.JSON200.Status)
	case <-time.After(10 * time.Second):
		t.Fatal("the other gateway's waiter was not told")
	}
}

func TestRerun(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	operator := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ops", Tenant: auth.DefaultTenant, Roles: []string{"operator"}}))
	invoker := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ivy", Tenant: auth.DefaultTenant, Roles: []string{"invoker"}}))

	t.Run("FailedRunRerunsWithItsInputAsTheCaller", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "flaky", `{"fail_times":5}`, nil)
		require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status, string(resp.Body))
		old := getRun(t, c, resp.JSON200.ID)

		refused, err := operator.RerunRunWithResponse(t.Context(), old.ID, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, refused.StatusCode(), "a rerun starts a run: it needs runs:invoke")
		rerun, err := invoker.RerunRunWithResponse(t.Context(), old.ID, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, rerun.StatusCode(), string(rerun.Body))
		run := rerun.JSON202
		require.Equal(t, "/v1/runs/"+run.ID+"/result", rerun.HTTPResponse.Header.Get("Location"))
		require.NotEqual(t, old.ID, run.ID)
		require.Equal(t, &old.ID, run.RerunOf)
		require.Equal(t, protocol.RunStatusQueued, run.Status)
		require.JSONEq(t, string(*old.Input), string(*run.Input))
		require.Equal(t, "ivy", run.Identity.Subject, "the rerun runs as who reran it")
		require.Equal(t, "tester", getRun(t, c, old.ID).Identity.Subject, "the original's identity stays readable there")
		require.Nil(t, old.RerunOf)

		res, err := c.GetRunResultWithResponse(t.Context(), run.ID, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, protocol.RunStatusFailed, res.JSON200.Status, "fails the same way")
		require.Equal(t, &old.ID, getRun(t, c, run.ID).RerunOf)
	})

	t.Run("RunsOnTheCurrentRevision", func(t *testing.T) {
		// Not parallel with the other subtests: it registers a new revision.
		res := mustComplete(t, c, "hello", `{"name":"Ada"}`)
		old := getRun(t, c, res.ID)
		fn, err := c.GetFunctionWithResponse(t.Context(), "hello")
		require.NoError(t, err)
		reg, err := c.RegisterFunctionWithResponse(t.Context(), "hello", protocol.FunctionRegistration{URL: fn.JSON200.URL})
		require.NoError(t, err)
		require.Equal(t, old.Revision+1, reg.JSON200.Revision)
		rerun, err := c.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, rerun.StatusCode(), string(rerun.Body))
		require.Equal(t, reg.JSON200.Revision, rerun.JSON202.Revision)
		done, err := c.GetRunResultWithResponse(t.Context(), rerun.JSON202.ID, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.JSONEq(t, `{"greeting":"Hello, Ada!"}`, string(*done.JSON200.Output))
	})

	t.Run("UnfinishedRunIsAConflict", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.checkout", `{"sleep_ms":60000}`)
		rerun, err := c.RerunRunWithResponse(t.Context(), id, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, rerun.StatusCode(), string(rerun.Body))
		require.Contains(t, rerun.ApplicationProblemJSON409.Detail, "only a finished run")
		cancel, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode())
		rerun, err = c.RerunRunWithResponse(t.Context(), id, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, rerun.StatusCode(), "a cancelled run can be rerun")
		cancel, err = c.CancelRunWithResponse(t.Context(), rerun.JSON202.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode())
	})

	t.Run("OtherTenantsRunsAreNotFound", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "hello", `{}`)
		other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))
		rerun, err := other.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, rerun.StatusCode())
	})
}

func TestRerunOfUnregisteredFunction(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	res := mustComplete(t, c, "hello", `{}`)
	del, err := c.DeleteFunctionWithResponse(t.Context(), "hello")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode())
	rerun, err := c.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, rerun.StatusCode())
	require.Contains(t, rerun.ApplicationProblemJSON404.Detail, `"hello"`)
	require.Contains(t, rerun.ApplicationProblemJSON404.Detail, "no longer registered")
}

func TestFunctionStats(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	mustComplete(t, c, "hello", `{"name":"a"}`)
	mustComplete(t, c, "hello", `{"name":"b"}`)
	failed := startRun(t, c, "flaky", `{"fail_times":5}`, nil)
	require.Equal(t, protocol.RunStatusFailed, failed.JSON200.Status)
	mustComplete(t, c, "flaky", `{"fail_times":0}`)
	sleeping := startAsync(t, c, "orders.checkout", `{"sleep_ms":60000}`)
	cancelled := startAsync(t, c, "orders.checkout", `{"sleep_ms":60000}`)
	resp, err := c.CancelRunWithResponse(t.Context(), cancelled)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode())

	stats, err := c.FunctionStatsWithResponse(t.Context(), &protocol.FunctionStatsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, stats.StatusCode(), string(stats.Body))
	require.Equal(t, "1h", stats.JSON200.Window)
	by := map[string]protocol.FunctionStats{}
	for _, f := range stats.JSON200.Functions {
		by[f.Name] = f
	}
	require.Len(t, by, 15, "every registered function, with runs or not")

	hello := by["hello"]
	require.Equal(t, []int{2, 2, 0, 0}, []int{hello.Runs, hello.Completed, hello.Failed, hello.Running})
	require.InDelta(t, 1, *hello.SuccessRate, 1e-6)
	require.NotNil(t, hello.P50Ms)
	require.NotNil(t, hello.LastRunAt)

	flaky := by["flaky"]
	require.Equal(t, []int{2, 1, 1, 0}, []int{flaky.Runs, flaky.Completed, flaky.Failed, flaky.Running})
	require.InDelta(t, 0.5, *flaky.SuccessRate, 1e-6)

	checkout := by["orders.checkout"]
	require.Equal(t, []int{2, 0, 1, 1}, []int{checkout.Runs, checkout.Completed, checkout.Failed, checkout.Running},
		"one sleeping, one cancelled (counted as failed)")
	require.InDelta(t, 0, *checkout.SuccessRate, 1e-6)
	require.Nil(t, checkout.P50Ms, "a cancellation has no duration worth a median")

	chain := by["chain"]
	require.Zero(t, chain.Runs)
	require.Nil(t, chain.SuccessRate)
	require.Nil(t, chain.LastRunAt)

	for _, w := range []string{"soon", "-1h", "721h"} {
		bad, err := c.FunctionStatsWithResponse(t.Context(), &protocol.FunctionStatsParams{Window: &w})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, bad.StatusCode(), w)
	}
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))
	none, err := other.FunctionStatsWithResponse(t.Context(), &protocol.FunctionStatsParams{Window: ptr("24h")})
	require.NoError(t, err)
	require.Empty(t, none.JSON200.Functions)
	require.Equal(t, "24h", none.JSON200.Window)

	resp, err = c.CancelRunWithResponse(t.Context(), sleeping)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode())
}

// TestRerunHonoursInvokeRoles: a rerun is a start by the caller, whom the function's
// current invoke_roles must allow; it never borrows the original run's identity.
func TestRerunHonoursInvokeRoles(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	admin := s.Client(t, s.Token)
	fn, err := admin.GetFunctionWithResponse(t.Context(), "hello")
	require.NoError(t, err)
	register := func(roles ...string) {
		t.Helper()
		reg, err := admin.RegisterFunctionWithResponse(t.Context(), "hello", protocol.FunctionRegistration{
			URL: fn.JSON200.URL, Config: &protocol.FunctionConfig{InvokeRoles: &roles}})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	}
	register("greeter")
	greeter := s.Client(t, s.NewToken(t, auth.Identity{Subject: "gia", Tenant: auth.DefaultTenant, Roles: []string{"invoker", "greeter"}}))
	res := mustComplete(t, greeter, "hello", `{}`)

	rerun, err := greeter.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, rerun.StatusCode(), string(rerun.Body))
	require.Equal(t, "gia", rerun.JSON202.Identity.Subject)

	// An invoker the function refuses cannot get a run of it by rerunning gia's.
	ivy := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ivy", Tenant: auth.DefaultTenant, Roles: []string{"invoker"}}))
	refused, err := ivy.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, refused.StatusCode(), string(refused.Body))
	require.Equal(t, "function hello may be invoked only by the roles (greeter) or admin; the token's roles (invoker) include none of them",
		refused.ApplicationProblemJSON403.Detail)

	register("someone-else")
	refused, err = greeter.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, refused.StatusCode(), "the current revision's roles count")
	byAdmin, err := admin.RerunRunWithResponse(t.Context(), res.ID, protocol.RerunRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, byAdmin.StatusCode())
	require.Equal(t, "tester", byAdmin.JSON202.Identity.Subject)
	runs, err := admin.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("hello")})
	require.NoError(t, err)
	require.Len(t, runs.JSON200.Runs, 3, "the refused reruns left no run behind")
}
