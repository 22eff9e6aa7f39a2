package gateway_test

import (
	"context"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/protocol"
)

// seedFailed inserts n runs of the tenant's function that failed at seq 2: seq 1 is a
// step "one" that succeeded, seq 2 a step "two" that failed with message, and the run's
// error is the same. It returns their ids, oldest first.
func seedFailed(t *testing.T, s *stack.Stack, tenant, function, errType, message string, n int) []string {
	t.Helper()
	rows, err := s.Pool.Query(t.Context(), `
		WITH runs AS (
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, error, created_at, finished_at)
			SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'failed', '{}', jsonb_build_object('subject', 'seed', 'tenant', f.tenant),
				jsonb_build_object('type', $3::text, 'message', replace($4::text, '#', i::text)),
				now() - make_interval(secs => ($5::int + 1 - i) / 1000.0), now() - make_interval(secs => ($5::int + 1 - i) / 1000.0)
			FROM stepgate.function f, generate_series(1, $5::int) i
			WHERE f.tenant = $1 AND f.name = $2
			RETURNING id, tenant, created_at, error
		), one AS (
			INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation)
			SELECT tenant, id, 1, 'step', 'one', '1', 1 FROM runs
		), two AS (
			INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, error, invocation)
			SELECT tenant, id, 2, 'step', 'two', error, 1 FROM runs
		)
		SELECT id::text FROM runs ORDER BY created_at`, tenant, function, errType, message, n)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n)
	return ids
}

// syncRedriveApp registers redrive.a and redrive.b in each client's tenant: two steps
// that succeed; ones counts the executions of step "one".
func syncRedriveApp(t *testing.T, s *stack.Stack, ones *atomic.Int64, clients ...*protocol.ClientWithResponses) {
	t.Helper()
	app := s.NewApp()
	fn := func(ctx context.Context, _ struct{}) (int, error) {
		a, err := step.Run(ctx, "one", func(context.Context) (int, error) { ones.Add(1); return 1, nil })
		if err != nil {
			return 0, err
		}
		b, err := step.Run(ctx, "two", func(context.Context) (int, error) { return 2, nil })
		return a + b, err
	}
	functions.Register(app, "redrive.a", fn)
	functions.Register(app, "redrive.b", fn)
	url := s.ServeApp(t, app)
	for _, cl := range clients {
		synced, err := cl.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}
}

func countReruns(t *testing.T, s *stack.Stack, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND rerun_of IS NOT NULL`, tenant).Scan(&n))
	return n
}

// TestBulkRerun redrives failed runs by filter through a real gateway: only the caller's
// tenant's, from the failing step, each linked both ways; and checks the permissions and
// bounds of POST /v1/runs/rerun and the cancel of an operation.
func TestBulkRerun(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	c2 := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"developer"}}))
	var ones atomic.Int64
	syncRedriveApp(t, s, &ones, c, c2)
	failedA := seedFailed(t, s, "t1", "redrive.a", "http_status", "order # not found", 30)
	seedFailed(t, s, "t1", "redrive.b", "http_status", "order # not found", 5)
	seedFailed(t, s, "t2", "redrive.a", "http_status", "order # not found", 20)
	failed := &[]protocol.RunStatus{protocol.RunStatusFailed}
	body := protocol.RerunRunsRequest{Filter: protocol.CancelFilter{Function: ptr("redrive.a"), Status: failed}}

	t.Run("Permissions", func(t *testing.T) {
		for role, perm := range map[string]string{"viewer": "runs:invoke", "operator": "runs:invoke", "invoker": "runs:manage"} {
			cl := s.Client(t, s.NewToken(t, auth.Identity{Subject: role, Tenant: "t1", Roles: []string{role}}))
			resp, err := cl.RerunRunsWithResponse(t.Context(), body)
			require.NoError(t, err)
			require.Equal(t, http.StatusForbidden, resp.StatusCode(), "%s: %s", role, resp.Body)
			require.Contains(t, string(resp.Body), perm, role)
		}
		viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))
		resp, err := viewer.CancelOperationWithResponse(t.Context(), parseUUID(t, uuidV7(t)))
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "runs:manage")
		require.Zero(t, countReruns(t, s, "t1"))
	})

	t.Run("Bounds", func(t *testing.T) {
		before := time.Now().Add(-time.Hour)
		for name, b := range map[string]protocol.RerunRunsRequest{
			"filter":             {},
			"filter.status":      {Filter: protocol.CancelFilter{Status: &[]protocol.RunStatus{protocol.RunStatusQueued}}},
			"filter.error_group": {Filter: protocol.CancelFilter{ErrorGroup: ptr("not-a-key")}},
			"filter.error_type":  {Filter: protocol.CancelFilter{ErrorType: ptr("")}},
			"created_after":      {Filter: protocol.CancelFilter{CreatedAfter: ptr(before), CreatedBefore: ptr(before)}},
			"from_seq":           {Filter: body.Filter, FromSeq: ptr(0)},
			"from":               {Filter: body.Filter, FromSeq: ptr(2), From: ptr(protocol.RerunRunsRequestFromFailure)},
		} {
			resp, err := c.RerunRunsWithResponse(t.Context(), b)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), "%s: %s", name, resp.Body)
			require.Contains(t, string(resp.Body), name)
		}
		// A cancel's filter takes no error criteria.
		resp, err := c.CancelRunsWithResponse(t.Context(), protocol.CancelFilter{ErrorType: ptr("timeout")})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Zero(t, countReruns(t, s, "t1"))
	})

	t.Run("FromFailureInOneTenant", func(t *testing.T) {
		// A completed and a cancelled run of redrive.a: a filter without a status redrives
		// failed runs only (openapi.yaml's rerunRuns says so).
		_, err := s.Pool.Exec(t.Context(), `
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, output, created_at, finished_at)
			SELECT gen_random_uuid(), f.tenant, f.name, f.revision, st.status, '{}', '{"subject":"seed","tenant":"t1"}', st.output, now() - interval '1 s', now() - interval '1 s'
			FROM stepgate.function f, (VALUES ('completed', '1'::jsonb), ('cancelled', NULL)) st (status, output)
			WHERE f.tenant = 't1' AND f.name = 'redrive.a'`)
		require.NoError(t, err)
		resp, err := c.RerunRunsWithResponse(t.Context(), protocol.RerunRunsRequest{
			Filter: protocol.CancelFilter{Function: ptr("redrive.a")}, From: ptr(protocol.RerunRunsRequestFromFailure)})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.Rerun, resp.JSON202.Kind)
		require.Equal(t, "alice", resp.JSON202.By.Subject)
		op := awaitOperation(t, c, resp.JSON202.ID.String())
		require.Equal(t, protocol.OperationStatusCompleted, op.Status, "%+v", op)
		require.EqualValues(t, 30, op.Done)
		require.Zero(t, op.Failed)
		require.NotNil(t, op.Matched)
		require.EqualValues(t, 30, *op.Matched)
		require.Equal(t, protocol.OperationFrom("failure"), *op.From)
		require.Equal(t, 30, countReruns(t, s, "t1"), "redrive.b's failed runs are left alone")
		var notFailed int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `
			SELECT count(*) FROM stepgate.run o JOIN stepgate.run r ON r.rerun_of = o.id
			WHERE o.tenant = 't1' AND o.status <> 'failed'`).Scan(&notFailed))
		require.Zero(t, notFailed, "no completed or cancelled run was rerun")
		require.Zero(t, countReruns(t, s, "t2"), "another tenant's runs are never rerun")

		old := getRun(t, c, failedA[0])
		require.NotNil(t, old.RerunBy)
		require.Len(t, *old.RerunBy, 1)
		newID := (*old.RerunBy)[0]
		require.Eventually(t, func() bool { return getRun(t, c, newID).Status == protocol.RunStatusCompleted },
			30*time.Second, 10*time.Millisecond)
		rerun := getRun(t, c, newID)
		require.Equal(t, failedA[0], *rerun.RerunOf)
		require.Equal(t, "alice", rerun.Identity.Subject, "a redriven run runs as the caller")
		require.Len(t, rerun.Journal, 2)
		require.True(t, rerun.Journal[0].Copied != nil && *rerun.Journal[0].Copied, "the entry before the failing seq is copied")
		require.False(t, rerun.Journal[1].Copied != nil && *rerun.Journal[1].Copied, "the failing step runs again")
		require.Zero(t, ones.Load(), "step one was replayed, not run again")
	})

	t.Run("ASecondRunningOperationIsRefused", func(t *testing.T) {
		held, err := operation.CreateOperation(t.Context(), s.Pool, uuidV7(t), "t2", operation.OperationKindRerun,
			operation.CancelFilter{Function: ptr("redrive.b")}, &operation.RerunOptions{}, journal.Identity{Subject: "bob", Tenant: "t2"})
		require.NoError(t, err)
		resp, err := c2.RerunRunsWithResponse(t.Context(), body)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), held.ID)

		// Another tenant cannot see or cancel it; its own tenant can, once.
		other, err := c.CancelOperationWithResponse(t.Context(), parseUUID(t, held.ID))
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, other.StatusCode(), string(other.Body))
		cancelled, err := c2.CancelOperationWithResponse(t.Context(), parseUUID(t, held.ID))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancelled.StatusCode(), string(cancelled.Body))
		require.Equal(t, protocol.OperationStatusCancelled, cancelled.JSON200.Status)
		require.Equal(t, "bob", cancelled.JSON200.CancelledBy.Subject)
		again, err := c2.CancelOperationWithResponse(t.Context(), parseUUID(t, held.ID))
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, again.StatusCode(), string(again.Body))
		require.Contains(t, string(again.Body), "cancelled")
		require.Zero(t, countReruns(t, s, "t2"))
	})

	t.Run("FailuresAreCountedAndSampled", func(t *testing.T) {
		// from_seq 5 is past every run's last seq + 1 (3): none can be rerun from it.
		resp, err := c.RerunRunsWithResponse(t.Context(), protocol.RerunRunsRequest{
			Filter: protocol.CancelFilter{Function: ptr("redrive.b"), Status: failed}, FromSeq: ptr(5),
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		op := awaitOperation(t, c, resp.JSON202.ID.String())
		require.Equal(t, protocol.OperationStatusCompleted, op.Status, "%+v", op)
		require.EqualValues(t, 0, op.Done)
		require.EqualValues(t, 5, op.Failed)
		require.NotNil(t, op.Errors)
		require.Len(t, *op.Errors, 5)
		require.Contains(t, (*op.Errors)[0].Error, "from_seq must be between 1 and 3")
		require.Equal(t, 30, countReruns(t, s, "t1"))
	})
}

// TestBulkRerun100k measures a bulk rerun from the failing step of 100,000 failed runs
// (docs/benchmarks-history.md, "Bulk rerun (redrive) and the dead-letter view"): the time to the
// 202, and to the operation's end, when every new run is created, its entry before the
// failing seq copied, and its job enqueued. The new runs execute meanwhile, through the
// normal path, on the same machine. It runs only with STEPGATE_BENCH_BULK=1.
func TestBulkRerun100k(t *testing.T) {
	if os.Getenv("STEPGATE_BENCH_BULK") == "" {
		t.Skip("set STEPGATE_BENCH_BULK=1 to measure a bulk rerun of 100,000 runs")
	}
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	var ones atomic.Int64
	syncRedriveApp(t, s, &ones, c)
	const n = 100_000
	seeded := time.Now()
	seedFailed(t, s, "t1", "redrive.a", "http_status", "order # not found", n)
	_, err := s.Pool.Exec(t.Context(), `ANALYZE stepgate.run; ANALYZE stepgate.journal_entry`)
	require.NoError(t, err)
	t.Logf("seeded %d failed runs with 2 entries each in %s", n, time.Since(seeded).Round(time.Millisecond))

	began := time.Now()
	resp, err := c.RerunRunsWithResponse(t.Context(), protocol.RerunRunsRequest{
		Filter: protocol.CancelFilter{Function: ptr("redrive.a"), Status: &[]protocol.RunStatus{protocol.RunStatusFailed}},
		From:   ptr(protocol.RerunRunsRequestFromFailure),
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	answered := time.Since(began)
	var op protocol.Operation
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := c.GetOperationWithResponse(t.Context(), resp.JSON202.ID)
		if assert.NoError(ct, err) && assert.NotNil(ct, r.JSON200) {
			op = *r.JSON200
			assert.NotEqual(ct, protocol.OperationStatusRunning, op.Status)
		}
	}, 30*time.Minute, 100*time.Millisecond)
	ended := time.Since(began)
	took := op.FinishedAt.Sub(op.CreatedAt)
	require.Equal(t, protocol.OperationStatusCompleted, op.Status, "%+v", op)
	require.EqualValues(t, n, op.Done)
	var completed int
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM stepgate.run WHERE tenant = 't1' AND rerun_of IS NOT NULL AND status = 'completed'`).Scan(&completed))
	t.Logf("BULK RERUN: %d runs rerun from the failing step in %s (202 after %s, seen ended after %s), %d batches, %s per batch on average; %d of the new runs had completed by then",
		op.Done, took.Round(time.Millisecond), answered.Round(time.Millisecond), ended.Round(time.Millisecond), op.Batches,
		(took / time.Duration(op.Batches)).Round(time.Microsecond), completed)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var left int
		assert.NoError(ct, s.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM stepgate.run WHERE tenant = 't1' AND rerun_of IS NOT NULL AND status <> 'completed'`).Scan(&left))
		assert.Zero(ct, left)
	}, 30*time.Minute, time.Second)
	t.Logf("BULK RERUN: every new run completed %s after the 202", time.Since(began).Round(time.Millisecond))
}
