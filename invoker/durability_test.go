package invoker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

func ptr[T any](v T) *T { return &v }

// awaitResult waits up to 30s, through the API, for the run to finish.
func awaitResult(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunResult {
	t.Helper()
	resp, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), "the run did not finish in 30s: %s", resp.Body)
	return *resp.JSON200
}

func getRun(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	resp, err := c.GetRunWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

// invocationRecorder passes requests on to h, noting the checkpoint URL of each
// invocation, which names the gateway that made it.
type invocationRecorder struct {
	h    http.Handler
	mu   sync.Mutex
	urls []string
}

func (rec *invocationRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, err := stack.PeekInvocation(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req protocol.InvocationRequest
		if json.Unmarshal(body, &req) == nil {
			rec.mu.Lock()
			rec.urls = append(rec.urls, req.Checkpoint.URL)
			rec.mu.Unlock()
		}
	}
	rec.h.ServeHTTP(w, r)
}

func (rec *invocationRecorder) checkpointURLs() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.urls...)
}

// TestGatewayDiesDuringInvocation (guarantee 7): a run claimed by a gateway that died
// before invoking it is recovered once its lease lapses, not counted as a failed
// attempt, and another invocation completes it.
func TestGatewayDiesDuringInvocation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const leaseTTL = 200 * time.Millisecond
	s := stack.Start(t, stack.Options{LeaseTTL: leaseTTL, MaintainInterval: 20 * time.Millisecond})
	var calls atomic.Int32
	app := s.NewApp()
	functions.Register(app, "quick", func(ctx context.Context, _ struct{}) (string, error) {
		calls.Add(1)
		return "done", nil
	}, functions.InvocationTimeout(100*time.Millisecond), functions.InvocationAttempts(1))
	s.Sync(t, s.ServeApp(t, app))

	// As a gateway does for a caller who waits: create the run claimed, then (here:
	// never, as it dies) invoke it.
	run, created, err := journal.CreateRun(ctx, s.Pool, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "quick", Input: json.RawMessage(`{}`),
		Identity: journal.Identity{Subject: "tester", Tenant: auth.DefaultTenant}, Claim: true, Lease: leaseTTL,
	})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, journal.StatusRunning, run.Status)

	c := s.Client(t, s.Token)
	res := awaitResult(t, c, run.ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "one attempt allowed, and the recovery is not one")
	require.JSONEq(t, `"done"`, string(*res.Output))
	require.EqualValues(t, 1, calls.Load(), "the dead gateway's invocation never reached the function")

	detail := getRun(t, c, run.ID)
	require.Equal(t, 2, detail.Invocations, "the dead gateway's claim and the recovery")
	require.Empty(t, detail.Failures, "a recovery is not a failed attempt")
	require.Equal(t, 1, detail.Recoveries, "the run's recoveries in its lifetime: the completion resets only the count in a row")
	require.Zero(t, detail.FailedInvocations, "a recovery is not a failed invocation")
}

// TestSleepSurvivesGatewayStop (guarantee 7): a run asleep on a gateway that stops is
// woken by another gateway on the same database, through the River job scheduled with
// the sleep, as the local timer is gone.
func TestSleepSurvivesGatewayStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL := pgtest.DBURL(t)
	a := stack.Start(t, stack.Options{DatabaseURL: dbURL})
	app := a.NewApp()
	examples.Register(app)
	rec := &invocationRecorder{h: app}
	a.Sync(t, a.ServeApp(t, rec))

	ca := a.Client(t, a.Token)
	start, err := ca.StartRunWithBodyWithResponse(ctx, "orders.checkout", &protocol.StartRunParams{},
		"application/json", strings.NewReader(`{"sleep_ms":300}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, start.StatusCode(), string(start.Body))
	id := start.JSON202.ID

	// Stop a's invoker while the run sleeps, before its local timer fires.
	awaitCondition(t, 10*time.Second, func() bool { return getRun(t, ca, id).Status == protocol.RunStatusSuspended },
		"suspension at the sleep")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, a.Invoker.Stop(stopCtx))

	b := stack.Start(t, stack.Options{DatabaseURL: dbURL})
	cb := b.Client(t, b.Token)
	began := time.Now()
	res := awaitResult(t, cb, id)
	t.Logf("gateway b finished the run %s after it started, through River's scheduled job", time.Since(began).Round(time.Millisecond))
	require.Equal(t, protocol.RunStatusCompleted, res.Status)

	detail := getRun(t, cb, id)
	require.Equal(t, 2, detail.Invocations, "one invocation before the sleep, one after")
	require.Len(t, detail.Journal, 4)
	sleep, ship := detail.Journal[2], detail.Journal[3]
	require.Equal(t, protocol.EntryKindSleep, sleep.Kind)
	require.Equal(t, "ship", ship.Name)
	require.False(t, ship.FinishedAt.Before(*sleep.Until), "woken at its wake time, not before")

	urls := rec.checkpointURLs()
	require.Len(t, urls, 2)
	require.True(t, strings.HasPrefix(urls[0], a.URL+"/"), "gateway a made the first invocation: %s", urls[0])
	require.True(t, strings.HasPrefix(urls[1], b.URL+"/"), "gateway b made the second invocation: %s", urls[1])
}

// TestLocalTimerWakesOnTime measures how late a gateway's own timer wakes a 1s sleep.
// Speed is measured and logged, not asserted.
func TestLocalTimerWakesOnTime(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	start, err := c.StartRunWithBodyWithResponse(t.Context(), "orders.checkout", &protocol.StartRunParams{Wait: ptr("30s")},
		"application/json", strings.NewReader(`{"sleep_ms":1000}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, start.StatusCode(), string(start.Body))
	require.Equal(t, protocol.RunStatusCompleted, start.JSON200.Status)

	run := getRun(t, c, start.JSON200.ID)
	require.Len(t, run.Journal, 4)
	sleep, ship := run.Journal[2], run.Journal[3]
	require.Equal(t, protocol.EntryKindSleep, sleep.Kind)
	require.Equal(t, "ship", ship.Name)
	late := ship.FinishedAt.Sub(*sleep.Until)
	t.Logf("the step after a 1s sleep finished %s after the sleep's until (database clock)", late)
	require.GreaterOrEqual(t, late, time.Duration(0), "the step after the sleep ran before its wake time")
	require.Equal(t, 2, run.Invocations)
}

// TestStrandedRunsAreSwept: a run that is due with no job to invoke it (an operator
// deleted the job in River's UI, or River discarded it) is found by the sweep and run.
func TestStrandedRunsAreSwept(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{MaintainInterval: 20 * time.Millisecond, SweepGrace: time.Millisecond})
	s.SyncExamples(t)
	ctx := t.Context()
	c := s.Client(t, s.Token)

	// A queued run whose job is gone, as if deleted: created without one.
	queued, _, err := journal.CreateRun(ctx, s.Pool, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "hello",
		Input: json.RawMessage(`{"name":"swept"}`), Identity: journal.Identity{Subject: "tester", Tenant: auth.DefaultTenant},
	})
	require.NoError(t, err)
	res := awaitResult(t, c, queued.ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `{"greeting":"Hello, swept!"}`, string(*res.Output))

	// A sleeping run whose wake-up job an operator deletes through River's UI, on a
	// gateway that has no timer for it (it stands for one that stopped).
	// It sleeps 1s: long enough for the test to find its job still scheduled on a loaded
	// machine (300ms was not, once), short enough for the sweep to wake it soon after.
	resp := startRunAsync(t, c, "orders.checkout", `{"sleep_ms":1000}`)
	id := resp.ID
	awaitCondition(t, 10*time.Second, func() bool { return getRun(t, c, id).Status == protocol.RunStatusSuspended }, "the run asleep")
	s.Invoker.ForgetTimers(id) // as a gateway restart would
	var jobs []int64
	rows, err := s.Pool.Query(ctx, `SELECT id FROM river_job WHERE kind = 'stepgate.invoke' AND args->>'run_id' = $1 AND state IN ('scheduled', 'available')`, id)
	require.NoError(t, err)
	for rows.Next() {
		var j int64
		require.NoError(t, rows.Scan(&j))
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, jobs, "the sleep's wake-up job")
	for _, j := range jobs {
		_, err := s.Invoker.River().JobDelete(ctx, j)
		require.NoError(t, err)
	}
	res = awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "woken by the sweep")
}

func startRunAsync(t *testing.T, c *protocol.ClientWithResponses, name, input string) protocol.RunResult {
	t.Helper()
	resp, err := c.StartRunWithBodyWithResponse(t.Context(), name, &protocol.StartRunParams{}, "application/json", strings.NewReader(input))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return *resp.JSON202
}
