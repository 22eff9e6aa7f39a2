package invoker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// blocker is a function whose first invocation blocks until release is closed or its
// request is cancelled (recorded in abandoned); later invocations answer at once.
type blocker struct {
	entered   chan string // the run id, when the first invocation starts
	release   chan struct{}
	abandoned atomic.Bool
	calls     atomic.Int32
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan string, 1), release: make(chan struct{})}
}

func (b *blocker) register(app *functions.App, name string) {
	functions.Register(app, name, func(ctx context.Context, _ struct{}) (string, error) {
		if b.calls.Add(1) > 1 {
			return "later", nil
		}
		b.entered <- functions.RunFrom(ctx).ID
		select {
		case <-b.release:
			return "first", nil
		case <-ctx.Done():
			b.abandoned.Store(true)
			return "", ctx.Err()
		}
	}, functions.InvocationTimeout(time.Minute), functions.InvocationAttempts(1))
}

func (b *blocker) awaitEntered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-b.entered:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("the function was not invoked within 30s")
		return ""
	}
}

// startBlocked registers a blocker function called name on s, starts a run of it and
// returns once its first invocation has begun.
func startBlocked(t *testing.T, s *stack.Stack, name string) (*blocker, *protocol.ClientWithResponses, string) {
	t.Helper()
	b := newBlocker()
	app := s.NewApp()
	b.register(app, name)
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	id := startRunAsync(t, c, name, `{}`).ID
	require.Equal(t, id, b.awaitEntered(t))
	return b, c, id
}

// TestLeaseIsRenewedWhileTheFunctionRuns: an invocation that outlives many lease TTLs
// keeps its run: its gateway renews the lease, so no other takes it, and the run ends
// with one attempt and no recovery.
func TestLeaseIsRenewedWhileTheFunctionRuns(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{LeaseTTL: 200 * time.Millisecond, MaintainInterval: 10 * time.Millisecond})
	b, c, id := startBlocked(t, s, "slow")

	// Ten renewals: the invocation has outlived its 200ms TTL several times over.
	seen := map[time.Time]bool{}
	awaitCondition(t, 30*time.Second, func() bool {
		var until *time.Time
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT lease_until FROM stepgate.run WHERE id = $1`, id).Scan(&until))
		require.NotNil(t, until, "the run lost its lease")
		seen[*until] = true
		return len(seen) >= 10
	}, "ten renewals of the lease")
	close(b.release)

	res := awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `"first"`, string(*res.Output))
	detail := getRun(t, c, id)
	require.Equal(t, 1, detail.Invocations)
	require.Equal(t, 0, detail.Recoveries)
	require.False(t, b.abandoned.Load())
}

// TestLostLeaseAbandonsTheCall: when another gateway recovers a run (its lease lapsed),
// the gateway still calling the function learns it at its next renewal and abandons the
// call, which the function sees as its request cancelled; the recovered invocation
// completes the run, and the recovery is not a failed attempt.
func TestLostLeaseAbandonsTheCall(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{LeaseTTL: time.Minute, MaintainInterval: 10 * time.Millisecond, SweepGrace: time.Millisecond})
	b, c, id := startBlocked(t, s, "stolen")

	recoverAsAnotherGateway(t, s, id)

	res := awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `"later"`, string(*res.Output))
	awaitCondition(t, 30*time.Second, b.abandoned.Load, "the first call abandoned")
	detail := getRun(t, c, id)
	require.Equal(t, 2, detail.Invocations)
	require.Empty(t, detail.Failures, "a recovery is not a failed attempt")
	require.Zero(t, detail.FailedInvocations)
	require.Equal(t, 1, detail.Recoveries, "the completed run shows its recovery")
}

// TestDrainLetsInvocationsFinish: a stopping gateway's invocations in flight finish on
// it, their checkpoints and answers served, and nothing is handed over.
func TestDrainLetsInvocationsFinish(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	b, c, id := startBlocked(t, s, "finishing")

	type drained struct {
		n   int
		err error
	}
	done := make(chan drained, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		n, err := s.Invoker.Drain(ctx)
		done <- drained{n, err}
	}()
	require.Equal(t, 1, s.Invoker.Status().InFlight)
	close(b.release)
	d := <-done
	require.NoError(t, d.err)
	require.Zero(t, d.n, "the invocation finished; nothing was handed over")
	require.Zero(t, s.Invoker.Status().InFlight)

	detail := getRun(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, detail.Status)
	require.Equal(t, 1, detail.Invocations)
	require.Equal(t, 0, detail.Recoveries)
}

// TestDrainHandsOverTheRest: the invocations still in flight when the drain's grace
// ends are handed over: their leases released and their runs requeued at once, so
// another gateway takes them without waiting for the lease (a minute here) to lapse.
func TestDrainHandsOverTheRest(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DBURL(t)
	a := stack.Start(t, stack.Options{DatabaseURL: dbURL, LeaseTTL: time.Minute})
	b := newBlocker()
	app := a.NewApp()
	b.register(app, "handed")
	rec := &invocationRecorder{h: app}
	a.Sync(t, a.ServeApp(t, rec))
	ca := a.Client(t, a.Token)
	go func() {
		// A caller waits on gateway a, which invokes the run itself.
		_, _ = ca.StartRunWithBodyWithResponse(context.WithoutCancel(t.Context()), "handed",
			&protocol.StartRunParams{Wait: ptr("30s")}, "application/json", strings.NewReader(`{}`))
	}()
	id := b.awaitEntered(t)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	n, err := a.Invoker.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the invocation in flight was handed over")
	require.Zero(t, a.Invoker.Status().InFlight)
	awaitCondition(t, 30*time.Second, b.abandoned.Load, "the handed-over call abandoned")

	other := stack.Start(t, stack.Options{DatabaseURL: dbURL})
	res := awaitResult(t, other.Client(t, other.Token), id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `"later"`, string(*res.Output))
	detail := getRun(t, other.Client(t, other.Token), id)
	require.Equal(t, 2, detail.Invocations)
	require.Empty(t, detail.Failures, "a hand-over is not a failed attempt")
	require.Zero(t, detail.FailedInvocations)
	require.Equal(t, 1, detail.Recoveries, "a hand-over is a recovery")
	urls := rec.checkpointURLs()
	require.Len(t, urls, 2)
	require.True(t, strings.HasPrefix(urls[0], a.URL+"/"), urls[0])
	require.True(t, strings.HasPrefix(urls[1], other.URL+"/"), "the other gateway made the second invocation: %s", urls[1])
}

// TestMaxRecoveries: a run recovered more times in a row than the limit (every gateway
// that invoked it died) fails, so a poison run still ends.
func TestMaxRecoveries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := stack.Start(t, stack.Options{MaxRecoveries: 3})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	runs := map[int]string{}
	for _, recoveries := range []int{3, 4} {
		require.NoError(t, pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			run, _, err := journal.CreateRun(ctx, tx, journal.NewRun{
				ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "hello",
				Input: json.RawMessage(`{"name":"x"}`), Identity: journal.Identity{Subject: "tester", Tenant: auth.DefaultTenant},
			})
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE stepgate.run SET recoveries = $2 WHERE id = $1`, run.ID, recoveries); err != nil {
				return err
			}
			runs[recoveries] = run.ID
			return s.Invoker.Enqueue(ctx, tx, run.ID)
		}))
	}
	require.Equal(t, protocol.RunStatusCompleted, awaitResult(t, c, runs[3]).Status, "at the limit, the run goes on")
	res := awaitResult(t, c, runs[4])
	require.Equal(t, protocol.RunStatusFailed, res.Status)
	require.Equal(t, "max_recoveries", res.Error.Type)
	require.Contains(t, res.Error.Message, "recovered 4 times in a row")
	require.Contains(t, res.Error.Message, "limit of 3 (STEPGATE_MAX_RECOVERIES)")
}

// TestMaxRecoveriesShowsTheRecoveries: a run whose invocations are recovered, one after
// the other, until it fails max_recoveries shows the recoveries it failed at, and
// counts the invocations made, not the claim that failed it without calling.
func TestMaxRecoveriesShowsTheRecoveries(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{LeaseTTL: time.Minute, MaxRecoveries: 1})
	entered := make(chan string, 3)
	app := s.NewApp()
	functions.Register(app, "stuck", func(ctx context.Context, _ struct{}) (string, error) {
		entered <- functions.RunFrom(ctx).ID
		<-ctx.Done()
		return "", ctx.Err()
	}, functions.InvocationTimeout(time.Minute))
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	id := startRunAsync(t, c, "stuck", `{}`).ID

	for range 2 {
		select {
		case got := <-entered:
			require.Equal(t, id, got)
		case <-time.After(30 * time.Second):
			t.Fatal("the function was not invoked within 30s")
		}
		recoverAsAnotherGateway(t, s, id)
	}

	res := awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusFailed, res.Status)
	require.Equal(t, "max_recoveries", res.Error.Type)
	require.Contains(t, res.Error.Message, "recovered 2 times in a row")
	detail := getRun(t, c, id)
	require.Equal(t, 2, detail.Recoveries, "the recoveries it failed at")
	require.Equal(t, 2, detail.Invocations, "two calls; the claim that failed the run made none")
	require.Zero(t, detail.FailedInvocations, "recoveries are not failed invocations")
	require.Empty(t, entered, "no third call")
}

// TestFunctionClosesTheConnection: a function that accepts a request and closes the
// connection, before answering or in the middle of its answer, fails the invocation with
// an error that says so.
func TestFunctionClosesTheConnection(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	// Request/response: the body is sent whole before the function hangs up, so what it
	// answered is read to the byte (a duplex body still going out may meet a reset).
	app := s.NewRequestApp()
	functions.Register(app, "hangup", func(ctx context.Context, _ struct{}) (string, error) { return "", nil },
		functions.InvocationAttempts(1))
	functions.Register(app, "cutoff", func(ctx context.Context, _ struct{}) (string, error) { return "", nil },
		functions.InvocationAttempts(1))
	url := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			app.ServeHTTP(w, r) // the manifest
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		require.NoError(t, err)
		defer conn.Close()
		if strings.HasSuffix(r.URL.Path, "/cutoff") {
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"status\":\"comp")
			buf.Flush()
		}
	}))
	s.Sync(t, url)
	c := s.Client(t, s.Token)
	for name, want := range map[string]string{
		"hangup": "the function closed the connection after accepting the request, without answering (attempt 1 of 1; giving up)",
		"cutoff": "the function closed the connection in the middle of its answer (HTTP 200, after 15 bytes of its body) (attempt 1 of 1; giving up)",
	} {
		res := awaitResult(t, c, startRunAsync(t, c, name, `{}`).ID)
		require.Equal(t, protocol.RunStatusFailed, res.Status, name)
		require.Equal(t, "connection", res.Error.Type, name)
		require.Equal(t, want, res.Error.Message, name)
	}
}

// recoverAsAnotherGateway recovers run id as another gateway would once its lease
// lapsed: it expires the lease, reaps it and enqueues the run again.
func recoverAsAnotherGateway(t *testing.T, s *stack.Stack, id string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE stepgate.run SET lease_until = now() - interval '1 s' WHERE id = $1`, id); err != nil {
			return err
		}
		ids, err := journal.ReapExpiredLeases(ctx, tx, 10)
		require.Equal(t, []string{id}, ids)
		if err != nil {
			return err
		}
		return s.Invoker.Enqueue(ctx, tx, id)
	}))
}
