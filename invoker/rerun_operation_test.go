package invoker_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/protocol"
)

func awaitOperation(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.Operation {
	t.Helper()
	var op protocol.Operation
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.GetOperationWithResponse(t.Context(), uuid.MustParse(id))
		if assert.NoError(ct, err) && assert.NotNil(ct, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body) {
			op = *resp.JSON200
			assert.NotEqual(ct, protocol.OperationStatusRunning, op.Status)
		}
	}, 60*time.Second, 10*time.Millisecond, "operation %s never finished", id)
	return op
}

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

// TestOperationCancelStopsIt cancels a bulk operation between two of its batches: it
// does no further batch.
func TestOperationCancelStopsIt(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	var ones atomic.Int64
	syncRedriveApp(t, s, &ones, c)
	seedFailed(t, s, "t1", "redrive.a", "boom", "failed", 10)
	by := journal.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	// An operation with no job behind it: the test does its batches.
	op, err := operation.CreateOperation(t.Context(), s.Pool, uuid.Must(uuid.NewV7()).String(), "t1", operation.OperationKindRerun,
		operation.CancelFilter{Function: new("redrive.a")}, &operation.RerunOptions{From: operation.RerunFromStart}, by)
	require.NoError(t, err)
	s.Invoker.SetRerunBatchSize(4)
	// The cancel comes after the first batch, while the worker goes on to the next.
	batches := 0
	s.Invoker.AfterRerunBatch(func() {
		if batches++; batches == 1 {
			resp, err := c.CancelOperationWithResponse(t.Context(), uuid.MustParse(op.ID))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		}
	})
	got, err := s.Invoker.RerunOperation(t.Context(), op.ID, -1)
	require.NoError(t, err)
	require.Equal(t, operation.OperationCancelled, got.Status)
	require.EqualValues(t, 4, got.Cancelled)
	require.Equal(t, 1, batches)
	require.Equal(t, 4, countReruns(t, s, "t1"), "no batch after the cancel")
	final := awaitOperation(t, c, op.ID)
	require.EqualValues(t, 4, final.Done)
	assert.Equal(t, protocol.OperationStatusCancelled, final.Status)
}

// TestBulkRerunResumesWithoutDuplicates does part of a bulk rerun and then the rest in
// new workers, as after a crash (River retries its job: it reads the operation's
// position afresh), two at once, as a rescued job beside a live one: each run is rerun
// once.
func TestBulkRerunResumesWithoutDuplicates(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	var ones atomic.Int64
	syncRedriveApp(t, s, &ones, c)
	seedFailed(t, s, "t1", "redrive.a", "boom", "failed", 25)
	by := journal.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	op, err := operation.CreateOperation(t.Context(), s.Pool, uuid.Must(uuid.NewV7()).String(), "t1", operation.OperationKindRerun,
		operation.CancelFilter{Function: new("redrive.a")}, &operation.RerunOptions{From: operation.RerunFromFailure}, by)
	require.NoError(t, err)
	s.Invoker.SetRerunBatchSize(3)
	got, err := s.Invoker.RerunOperation(t.Context(), op.ID, 2)
	require.NoError(t, err)
	require.EqualValues(t, 6, got.Cancelled)
	require.Equal(t, 6, countReruns(t, s, "t1"))

	// The "crash": the next workers start afresh, from the operation's row; two at once.
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.Invoker.RerunOperation(context.WithoutCancel(t.Context()), op.ID, -1)
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	final := awaitOperation(t, c, op.ID)
	require.Equal(t, protocol.OperationStatusCompleted, final.Status)
	require.EqualValues(t, 25, final.Done)
	require.Equal(t, 25, countReruns(t, s, "t1"))
	var twice int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM (
		SELECT rerun_of FROM stepgate.run WHERE tenant = 't1' AND rerun_of IS NOT NULL GROUP BY rerun_of HAVING count(*) > 1) d`).Scan(&twice))
	require.Zero(t, twice, "no run was rerun twice")
}

// TestBulkRerunOperation100k measures the work of a bulk rerun alone
// (docs/benchmarks-history.md, "Bulk rerun (redrive) and the dead-letter view"): 100,000 failed
// runs rerun from the failing step (each new run created, its entry before the failing
// seq copied, its job enqueued) by this process, with River stopped, so that no new run
// executes meanwhile. It runs only with STEPGATE_BENCH_BULK=1.
func TestBulkRerunOperation100k(t *testing.T) {
	if os.Getenv("STEPGATE_BENCH_BULK") == "" {
		t.Skip("set STEPGATE_BENCH_BULK=1 to measure a bulk rerun of 100,000 runs")
	}
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	var ones atomic.Int64
	syncRedriveApp(t, s, &ones, c)
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("STEPGATE_BENCH_RERUN_RUNS")); err == nil {
		n = v
	}
	batch := invoker.RerunBatchSize
	if v, err := strconv.Atoi(os.Getenv("STEPGATE_BENCH_RERUN_BATCH")); err == nil {
		batch = v
		s.Invoker.SetRerunBatchSize(v)
	}
	seedFailed(t, s, "t1", "redrive.a", "http_status", "order # not found", n)
	_, err := s.Pool.Exec(t.Context(), `ANALYZE stepgate.run; ANALYZE stepgate.journal_entry`)
	require.NoError(t, err)
	require.NoError(t, s.Invoker.River().Stop(t.Context()))
	by := journal.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	op, err := operation.CreateOperation(t.Context(), s.Pool, uuid.Must(uuid.NewV7()).String(), "t1", operation.OperationKindRerun,
		operation.CancelFilter{Function: new("redrive.a")}, &operation.RerunOptions{From: operation.RerunFromFailure}, by)
	require.NoError(t, err)
	began := time.Now()
	got, err := s.Invoker.RerunOperation(t.Context(), op.ID, -1)
	require.NoError(t, err)
	took := time.Since(began)
	require.Equal(t, operation.OperationCompleted, got.Status)
	require.EqualValues(t, n, got.Cancelled)
	var copied int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.journal_entry WHERE tenant = 't1' AND copied_from IS NOT NULL`).Scan(&copied))
	require.Equal(t, n, copied)
	t.Logf("BULK RERUN OPERATION: %d runs rerun from the failing step in %s (%d batches of %d, %s per batch, %s per run), River stopped",
		got.Cancelled, took.Round(time.Millisecond), got.Batches, batch,
		(took / time.Duration(got.Batches)).Round(time.Millisecond), (took / time.Duration(n)).Round(time.Microsecond))
}
