package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// TestTenantIsolation drives every tenant-scoped endpoint as tenant B against tenant A's
// functions and runs: B sees none of them, and what B does leaves them alone.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	ctx := t.Context()
	a := s.Client(t, s.Token) // the default tenant
	bToken := s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "tenant-b", Roles: []string{"admin"}})
	b := s.Client(t, bToken)

	// A's functions: the examples, and gate, which holds its run until released.
	started, release := make(chan string, 1), make(chan struct{})
	app := s.NewApp()
	examples.Register(app)
	functions.Register(app, "gate", func(ctx context.Context, _ struct{}) (string, error) {
		if _, err := step.Run(ctx, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		started <- functions.RunFrom(ctx).ID
		select {
		case <-release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	appURL := s.ServeApp(t, app)
	s.Sync(t, appURL)

	done := mustComplete(t, a, "hello", `{"name":"Ada"}`)
	gate := startRun(t, a, "gate", `{}`, &protocol.StartRunParams{})
	require.Equal(t, http.StatusAccepted, gate.StatusCode(), string(gate.Body))
	gateID := gate.JSON202.ID
	select {
	case id := <-started:
		require.Equal(t, gateID, id)
	case <-time.After(10 * time.Second):
		t.Fatal("gate did not start")
	}

	t.Run("FunctionsAreInvisible", func(t *testing.T) {
		list, err := b.ListFunctionsWithResponse(ctx)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode())
		require.Empty(t, list.JSON200.Functions)
		for _, name := range []string{"hello", "gate"} {
			got, err := b.GetFunctionWithResponse(ctx, name)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, got.StatusCode(), name)
			require.Equal(t, http.StatusNotFound, startRun(t, b, name, `{}`, nil).StatusCode(), "invoke %s", name)
			del, err := b.DeleteFunctionWithResponse(ctx, name)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, del.StatusCode(), "delete %s", name)
		}
		got, err := a.GetFunctionWithResponse(ctx, "hello")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, got.StatusCode(), "A's function survived B's delete")
	})

	t.Run("RunsAreInvisible", func(t *testing.T) {
		for _, id := range []string{done.ID, gateID} {
			run, err := b.GetRunWithResponse(ctx, id, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, run.StatusCode(), "get %s", id)
			res, err := b.GetRunResultWithResponse(ctx, id, &protocol.GetRunResultParams{})
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, res.StatusCode(), "result of %s", id)
			rerun, err := b.RerunRunWithResponse(ctx, id, protocol.RerunRunJSONRequestBody{})
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, rerun.StatusCode(), "rerun %s", id)
			cancel, err := b.CancelRunWithResponse(ctx, id)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, cancel.StatusCode(), "cancel %s", id)
		}
		for _, fn := range []*string{nil, ptr("hello"), ptr("gate")} {
			list, err := b.ListRunsWithResponse(ctx, &protocol.ListRunsParams{Function: fn})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, list.StatusCode())
			require.Empty(t, list.JSON200.Runs)
		}
		list, err := a.ListRunsWithResponse(ctx, &protocol.ListRunsParams{})
		require.NoError(t, err)
		require.Len(t, list.JSON200.Runs, 2, "A sees its own runs")
	})

	t.Run("WaitingOnAnotherTenantsRunIsNotFoundAtOnce", func(t *testing.T) {
		// Waiting the longest there is: a wait would outlast the test's timeout.
		res, err := b.GetRunResultWithResponse(ctx, gateID, &protocol.GetRunResultParams{Wait: ptr("15m")})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, res.StatusCode(), "a 404, not a wait")
		var notify bool
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT notify FROM stepgate.run WHERE id = $1`, gateID).Scan(&notify))
		require.False(t, notify, "B's attach did not mark A's run")
	})

	t.Run("CheckpointsNeedTheRunsOwnToken", func(t *testing.T) {
		url := s.URL + "/v1/runs/" + gateID + "/checkpoint"
		body := `{"seq":2,"kind":"step","name":"evil","output":1}`
		status, _ := rawRequest(t, "POST", url, bToken, "application/json", bytes.NewBufferString(body))
		require.Equal(t, http.StatusUnauthorized, status, "a user token")
		other := s.Tokens.Issue(t.Context(), done.ID, 1, time.Now().Add(time.Minute))
		status, _ = rawRequest(t, "POST", url, other, "application/json", bytes.NewBufferString(body))
		require.Equal(t, http.StatusUnauthorized, status, "an invocation token of another run")
	})

	t.Run("IdempotencyKeysArePerTenant", func(t *testing.T) {
		sync, err := b.SyncAppWithResponse(ctx, nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, sync.StatusCode(), string(sync.Body))
		got, err := a.GetFunctionWithResponse(ctx, "hello")
		require.NoError(t, err)
		require.Equal(t, 1, got.JSON200.Revision, "B's registration is not a revision of A's function")

		key := &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("order-1")}
		ra := startRun(t, a, "hello", `{"name":"a"}`, key)
		require.Equal(t, http.StatusOK, ra.StatusCode(), string(ra.Body))
		rb := startRun(t, b, "hello", `{"name":"b"}`, key)
		require.Equal(t, http.StatusOK, rb.StatusCode(), "the same key with another input is no conflict in another tenant: %s", rb.Body)
		require.NotEqual(t, ra.JSON200.ID, rb.JSON200.ID)
		require.JSONEq(t, `{"greeting":"Hello, b!"}`, string(*rb.JSON200.Output))
		again := startRun(t, b, "hello", `{"name":"b"}`, key)
		require.Equal(t, rb.JSON200.ID, again.JSON200.ID)
		again = startRun(t, a, "hello", `{"name":"a"}`, key)
		require.Equal(t, ra.JSON200.ID, again.JSON200.ID)

		list, err := b.ListRunsWithResponse(ctx, &protocol.ListRunsParams{})
		require.NoError(t, err)
		require.Len(t, list.JSON200.Runs, 1)
		require.Equal(t, rb.JSON200.ID, list.JSON200.Runs[0].ID)
		require.Equal(t, "tenant-b", list.JSON200.Runs[0].Identity.Tenant)
	})

	t.Run("TheOwnerStillSeesEverything", func(t *testing.T) {
		res := make(chan *protocol.GetRunResultResponse, 1)
		go func() {
			r, _ := a.GetRunResultWithResponse(ctx, gateID, &protocol.GetRunResultParams{Wait: ptr("30s")})
			res <- r
		}()
		// The waiter's attach marks the run before it is released, or finds it done.
		require.Eventually(t, func() bool {
			var notify bool
			_ = s.Pool.QueryRow(ctx, `SELECT notify FROM stepgate.run WHERE id = $1`, gateID).Scan(&notify)
			return notify
		}, 10*time.Second, 5*time.Millisecond)
		close(release)
		r := <-res
		require.NotNil(t, r)
		require.Equal(t, http.StatusOK, r.StatusCode(), string(r.Body))
		require.Equal(t, protocol.RunStatusCompleted, r.JSON200.Status)
		run := getRun(t, a, gateID)
		require.Len(t, run.Journal, 1)
	})
}

// TestAPIPoolIsFenced checks the gateway's pools as the stack wires them: the API pool
// acts as journal.AppRole, so row-level security applies, and sees no run without a
// tenant; the system pool acts as journal.SystemRole and sees every run.
func TestAPIPoolIsFenced(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	mustComplete(t, s.Client(t, s.Token), "hello", `{}`)
	ctx := t.Context()

	var user string
	var visible int
	require.NoError(t, s.APIPool.QueryRow(ctx, `SELECT current_user, (SELECT count(*) FROM stepgate.run)`).Scan(&user, &visible))
	require.Equal(t, journal.AppRole, user)
	require.Zero(t, visible, "no tenant, no runs")
	require.NoError(t, journal.ForTenant(s.APIPool, auth.DefaultTenant).QueryRow(ctx, `SELECT count(*) FROM stepgate.run`).Scan(&visible))
	require.Equal(t, 1, visible)
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT current_user, (SELECT count(*) FROM stepgate.run)`).Scan(&user, &visible))
	require.Equal(t, journal.SystemRole, user)
	require.Equal(t, 1, visible, "the system pool sees every tenant")
}
