package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/canceltree"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/protocol"
)

type treeInput struct {
	Detached bool `json:"detached"`
}

// awaitChild waits until the run of function whose parent is parentID has status, and
// returns it.
func awaitChild(t *testing.T, c *protocol.ClientWithResponses, function, parentID string, status protocol.RunStatus) protocol.Run {
	t.Helper()
	var child protocol.Run
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: &function, Status: &status})
		if !assert.NoError(ct, err) || !assert.NotNil(ct, resp.JSON200) {
			return
		}
		for _, r := range resp.JSON200.Runs {
			if r.ParentID != nil && *r.ParentID == parentID {
				child = r
				return
			}
		}
		ct.Errorf("no %s child of %s is %s yet", function, parentID, status)
	}, 30*time.Second, 5*time.Millisecond)
	return child
}

// syncTree registers tree.root, which invokes tree.mid, which invokes tree.leaf
// (detached when the input says so), which waits for a message on topic "go".
func syncTree(t *testing.T, s *stack.Stack, c *protocol.ClientWithResponses) {
	t.Helper()
	app := s.NewApp()
	functions.Register(app, "tree.leaf", func(ctx context.Context, _ struct{}) (string, error) {
		if _, err := step.Receive[any](ctx, "go", step.Timeout(time.Hour)).Get(); err != nil {
			return "", err
		}
		return "leaf done", nil
	})
	functions.Register(app, "tree.mid", func(ctx context.Context, in treeInput) (string, error) {
		var opts []step.Option
		if in.Detached {
			opts = append(opts, step.Detached())
		}
		return step.Invoke[string](ctx, "leaf", "tree.leaf", nil, opts...).Get()
	})
	functions.Register(app, "tree.root", func(ctx context.Context, in treeInput) (string, error) {
		return step.Invoke[string](ctx, "mid", "tree.mid", in).Get()
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
}

// TestCancelTree cancels a parent waiting for a child that waits for a grandchild that
// waits for a message, through a real gateway.
func TestCancelTree(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))

	syncTree(t, s, c)

	// startTree starts a root and waits until its grandchild waits for its message.
	startTree := func(t *testing.T, detached bool) (root string, mid, leaf protocol.Run) {
		start := startRun(t, c, "tree.root", fmt.Sprintf(`{"detached":%t}`, detached), &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
		root = start.JSON202.ID
		mid = awaitChild(t, c, "tree.mid", root, protocol.RunStatusSuspended)
		leaf = awaitChild(t, c, "tree.leaf", mid.ID, protocol.RunStatusSuspended)
		stack.AwaitStatus(t, c, root, protocol.RunStatusSuspended)
		return root, mid, leaf
	}

	t.Run("ChildrenAndGrandchildrenAreCancelledWithTheRoot", func(t *testing.T) {
		t.Parallel()
		root, mid, leaf := startTree(t, false)
		cancel, err := c.CancelRunWithResponse(t.Context(), root)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))

		// In the same transaction: no waiting.
		for _, r := range []struct{ id, parent string }{{mid.ID, root}, {leaf.ID, mid.ID}} {
			run := getRun(t, c, r.id)
			require.Equal(t, protocol.RunStatusCancelled, run.Status, r.id)
			require.Equal(t, "cancelled", run.Error.Type)
			require.Equal(t, "cancelled with its parent run "+r.parent+" by alice", run.Error.Message)
			require.NotNil(t, run.CancelledBy)
			require.Equal(t, "alice", run.CancelledBy.Subject)
			require.Nil(t, run.Awaiting, "its wait is gone")
		}
		require.Empty(t, getRun(t, c, root).Journal, "nothing is journaled in the cancelled root")
		require.Empty(t, getRun(t, c, mid.ID).Journal, "nothing is journaled in the cancelled child")

		// A message to the cancelled grandchild is refused: it waits no more.
		resp, err := c.SendMessageWithResponse(t.Context(), leaf.ID, protocol.MessageSend{Topic: "go"})
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
	})

	t.Run("ADetachedGrandchildGoesOnAndCompletes", func(t *testing.T) {
		t.Parallel()
		root, mid, leaf := startTree(t, true)
		cancel, err := c.CancelRunWithResponse(t.Context(), root)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))

		require.Equal(t, protocol.RunStatusCancelled, getRun(t, c, mid.ID).Status)
		detachedLeaf := getRun(t, c, leaf.ID)
		require.Equal(t, protocol.RunStatusSuspended, detachedLeaf.Status, "a detached child is not cancelled")
		require.NotNil(t, detachedLeaf.Detached)
		require.True(t, *detachedLeaf.Detached)
		require.Nil(t, getRun(t, c, mid.ID).Detached)

		sent, err := c.SendMessageWithResponse(t.Context(), leaf.ID, protocol.MessageSend{Topic: "go"})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, sent.StatusCode(), string(sent.Body))
		res, err := c.GetRunResultWithResponse(t.Context(), leaf.ID, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status)
		require.JSONEq(t, `"leaf done"`, string(*res.JSON200.Output))
		require.Empty(t, getRun(t, c, mid.ID).Journal, "its outcome is not journaled in the cancelled child")
	})

	t.Run("CancellingAMiddleChildWakesTheRootAndCancelsTheLeaf", func(t *testing.T) {
		t.Parallel()
		root, mid, leaf := startTree(t, false)
		cancel, err := c.CancelRunWithResponse(t.Context(), mid.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
		require.Equal(t, protocol.RunStatusCancelled, getRun(t, c, leaf.ID).Status)
		res, err := c.GetRunResultWithResponse(t.Context(), root, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusFailed, res.JSON200.Status, "the root returned its child's error")
		require.Equal(t, "cancelled", res.JSON200.Error.Type)
	})
}

// seedQueued creates n queued runs of function for tenant, with idempotency keys
// prefix-0..., and no job: nothing invokes them.
func seedQueued(t *testing.T, s *stack.Stack, tenant, function, prefix string, n int) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), s.Pool, func(tx pgx.Tx) error {
		for i := range n {
			_, _, err := journal.CreateRun(t.Context(), tx, journal.NewRun{
				ID: uuidV7(t), Tenant: tenant, Function: function, Input: []byte(`{}`),
				Identity:       journal.Identity{Subject: "seed", Tenant: tenant, Roles: []string{"admin"}},
				IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i),
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func countRuns(t *testing.T, s *stack.Stack, tenant, function, status string) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND function = $2 AND status = $3`,
		tenant, function, status).Scan(&n))
	return n
}

func awaitOperation(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.Operation {
	t.Helper()
	var op protocol.Operation
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.GetOperationWithResponse(t.Context(), parseUUID(t, id))
		if assert.NoError(ct, err) && assert.NotNil(ct, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body) {
			op = *resp.JSON200
			assert.NotEqual(ct, protocol.OperationStatusRunning, op.Status)
		}
	}, 60*time.Second, 10*time.Millisecond, "operation %s never finished", id)
	return op
}

// TestBulkCancel cancels runs by filter through a real gateway.
func TestBulkCancel(t *testing.T) {
	t.Parallel()
	// The seeded runs have no jobs: the stranded-run sweep would start them (and they
	// would complete, not be cancelled) if the cancel outlasted its grace under load.
	s := stack.Start(t, stack.Options{SweepGrace: time.Hour})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	bob := auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	c2 := s.Client(t, s.NewToken(t, bob))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))

	app := s.NewApp()
	functions.Register(app, "bulk.a", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	functions.Register(app, "bulk.b", func(ctx context.Context, _ struct{}) (int, error) { return 2, nil })
	url := s.ServeApp(t, app)
	for _, cl := range []*protocol.ClientWithResponses{c, c2} {
		synced, err := cl.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}
	seedQueued(t, s, "t1", "bulk.a", "a", 3000)
	seedQueued(t, s, "t1", "bulk.b", "b", 50)
	seedQueued(t, s, "t2", "bulk.a", "a", 50)

	resp, err := viewer.CancelRunsWithResponse(t.Context(), protocol.CancelFilter{Function: ptr("bulk.a")})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode(), "a viewer may not cancel: %s", resp.Body)

	before := time.Now().Add(-time.Hour)
	for name, f := range map[string]protocol.CancelFilter{
		"filter":                 {},
		"status":                 {Status: &[]protocol.RunStatus{protocol.RunStatusCompleted}},
		"function":               {Function: ptr("no spaces allowed")},
		"idempotency_key_prefix": {IdempotencyKeyPrefix: ptr("")},
		"created_after":          {CreatedAfter: ptr(before), CreatedBefore: ptr(before)},
	} {
		resp, err := c.CancelRunsWithResponse(t.Context(), f)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), "%s: %s", name, resp.Body)
		require.Contains(t, string(resp.Body), name)
	}

	resp, err = c.CancelRunsWithResponse(t.Context(), protocol.CancelFilter{
		Function: ptr("bulk.a"), Status: &[]protocol.RunStatus{protocol.RunStatusQueued}, IdempotencyKeyPrefix: ptr("a-"),
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	opID := resp.JSON202.ID.String()
	require.Equal(t, "alice", resp.JSON202.By.Subject)

	op := awaitOperation(t, c, opID)
	require.Equal(t, protocol.OperationStatusCompleted, op.Status, "%+v", op)
	require.EqualValues(t, 3000, op.Cancelled)
	require.NotNil(t, op.Matched)
	require.EqualValues(t, 3000, *op.Matched)
	require.GreaterOrEqual(t, op.Batches, 3)
	require.NotNil(t, op.FinishedAt)
	require.Equal(t, 3000, countRuns(t, s, "t1", "bulk.a", "cancelled"))
	require.Equal(t, 50, countRuns(t, s, "t1", "bulk.b", "queued"), "another function's runs are left alone")
	require.Equal(t, 50, countRuns(t, s, "t2", "bulk.a", "queued"), "another tenant's runs are never touched")

	other, err := c2.GetOperationWithResponse(t.Context(), parseUUID(t, opID))
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, other.StatusCode(), "another tenant's operation is invisible")

	t.Run("ASecondRunningOperationIsRefused", func(t *testing.T) {
		// A running operation of t2 with no job behind it stays running.
		held, err := operation.CreateOperation(t.Context(), s.Pool, uuidV7(t), "t2", operation.OperationKindCancel, operation.CancelFilter{Function: ptr("bulk.b")}, nil,
			journal.Identity{Subject: "bob", Tenant: "t2"})
		require.NoError(t, err)
		resp, err := c2.CancelRunsWithResponse(t.Context(), protocol.CancelFilter{Function: ptr("bulk.a")})
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), held.ID)
		require.Equal(t, 50, countRuns(t, s, "t2", "bulk.a", "queued"))
	})
}

func uuidV7(t *testing.T) string {
	t.Helper()
	return uuid.Must(uuid.NewV7()).String()
}

func parseUUID(t *testing.T, s string) uuid.UUID {
	t.Helper()
	u, err := uuid.Parse(s)
	require.NoError(t, err)
	return u
}

// TestBulkCancel100k measures a bulk cancel of 100,000 queued runs
// (docs/benchmarks-history.md, "Bulk cancel (issue 11)"). It runs only with STEPGATE_BENCH_BULK=1.
func TestBulkCancel100k(t *testing.T) {
	if os.Getenv("STEPGATE_BENCH_BULK") == "" {
		t.Skip("set STEPGATE_BENCH_BULK=1 to measure a bulk cancel of 100,000 runs")
	}
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "bulk.a", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	const n = 100_000
	_, err = s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, created_at)
		SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'queued', '{}', '{"subject":"seed","tenant":"t1"}',
			now() - make_interval(secs => i / 1000.0)
		FROM stepgate.function f, generate_series(1, $1) i
		WHERE f.tenant = 't1' AND f.name = 'bulk.a'`, n)
	require.NoError(t, err)
	_, err = s.Pool.Exec(t.Context(), `ANALYZE stepgate.run`)
	require.NoError(t, err)

	began := time.Now()
	resp, err := c.CancelRunsWithResponse(t.Context(), protocol.CancelFilter{Function: ptr("bulk.a")})
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
	}, 10*time.Minute, 50*time.Millisecond)
	took := op.FinishedAt.Sub(op.CreatedAt)
	require.EqualValues(t, n, op.Cancelled)
	t.Logf("BULK CANCEL: %d runs cancelled in %s (202 after %s), %d batches, %s per batch on average",
		op.Cancelled, took.Round(time.Millisecond), answered.Round(time.Millisecond), op.Batches,
		(took / time.Duration(op.Batches)).Round(time.Microsecond))
}

// TestCancelWideTree cancels a run with more children than one transaction cancels
// (canceltree.MaxTreeCancel): the rest are cancelled by the background job committed with
// the cancel.
func TestCancelWideTree(t *testing.T) {
	t.Parallel()
	// No sweep: the seeded runs have no job, and nothing but the cancel should move them.
	s := stack.Start(t, stack.Options{SweepGrace: time.Hour})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "wide", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	// A queued root (no job: nothing invokes it) with 10,050 queued children, 50 of
	// them detached, and a grandchild under each of the first 10.
	root := uuidV7(t)
	const children = canceltree.MaxTreeCancel + 50
	_, err = s.Pool.Exec(t.Context(), `
		WITH f AS (SELECT tenant, name, revision FROM stepgate.function WHERE tenant = 't1' AND name = 'wide'),
		r AS (
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
			SELECT $1, tenant, name, revision, 'queued', '{}', '{"subject":"seed","tenant":"t1"}' FROM f
		), kids AS (
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, parent_id, detached)
			SELECT gen_random_uuid(), tenant, name, revision, 'queued', '{}', '{"subject":"seed","tenant":"t1"}', $1, i > $2 - 50
			FROM f, generate_series(1, $2) i
			RETURNING id
		)
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, parent_id)
		SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'queued', '{}', '{"subject":"seed","tenant":"t1"}', k.id
		FROM f, (SELECT id FROM kids LIMIT 10) k`, root, children)
	require.NoError(t, err)
	// As autovacuum would after a bulk load (as the tables' owner: the gateway's roles
	// may not): with the statistics of the table before it, the planner may walk the
	// tenant's runs once per run to cancel.
	owner, err := pgx.Connect(t.Context(), s.Pool.Config().ConnString())
	require.NoError(t, err)
	_, err = owner.Exec(t.Context(), `ANALYZE stepgate.run`)
	require.NoError(t, err)
	require.NoError(t, owner.Close(t.Context()))

	cancel, err := c.CancelRunWithResponse(t.Context(), root)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
	cancelled := func() (n int) {
		require.NoError(t, s.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM stepgate.run WHERE function = 'wide' AND status = 'cancelled' AND id <> $1`, root).Scan(&n))
		return n
	}
	require.GreaterOrEqual(t, cancelled(), canceltree.MaxTreeCancel, "the first 10,000 in the cancel's transaction")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, children-50+10, cancelled(), "every child that is not detached, and the grandchildren")
	}, 60*time.Second, 20*time.Millisecond)
	require.Equal(t, 50, countRuns(t, s, "t1", "wide", "queued"), "the detached children go on")
}

// TestBulkCancelWakesParents bulk-cancels the children that parents wait for: each
// parent gets the cancellation as its child's outcome and goes on.
func TestBulkCancelWakesParents(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	syncTree(t, s, c)
	var mids []string
	for range 3 {
		start := startRun(t, c, "tree.mid", `{}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
		mids = append(mids, start.JSON202.ID)
	}
	for _, id := range mids {
		awaitChild(t, c, "tree.leaf", id, protocol.RunStatusSuspended)
	}
	resp, err := c.CancelRunsWithResponse(t.Context(), protocol.CancelFilter{Function: ptr("tree.leaf")})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	op := awaitOperation(t, c, resp.JSON202.ID.String())
	require.EqualValues(t, 3, op.Cancelled)
	for _, id := range mids {
		res, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusFailed, res.JSON200.Status, "the parent returned its child's error")
		require.Equal(t, "cancelled", res.JSON200.Error.Type)
		require.Contains(t, res.JSON200.Error.Message, "operation "+op.ID.String())
	}
}
