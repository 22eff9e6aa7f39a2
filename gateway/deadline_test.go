package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// startWith starts a run of name with params and returns its 202 answer.
func startWith(t *testing.T, c *protocol.ClientWithResponses, name string, params protocol.StartRunParams) protocol.RunResult {
	t.Helper()
	resp := startRun(t, c, name, `{}`, &params)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return *resp.JSON202
}

// requireDeadlineExceeded waits until run id has failed past its deadline.
func requireDeadlineExceeded(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	run := stack.AwaitStatus(t, c, id, protocol.RunStatusFailed)
	require.NotNil(t, run.Error)
	require.Equal(t, "deadline_exceeded", run.Error.Type, run.Error.Message)
	require.Contains(t, run.Error.Message, "deadline")
	require.NotNil(t, run.Deadline)
	require.Nil(t, run.Awaiting)
	require.Nil(t, run.WakeAt)
	return run
}

// TestDeadlines runs functions past their deadlines through a real gateway: running,
// suspended, queued, scheduled, from the function's run_timeout, and a child's.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	app := s.NewApp()
	functions.Register(app, "sleepy", func(ctx context.Context, _ struct{}) (string, error) {
		return "woke", step.Sleep(ctx, "nap", time.Hour)
	})
	functions.Register(app, "bounded", func(ctx context.Context, _ struct{}) (string, error) {
		return "woke", step.Sleep(ctx, "nap", time.Hour)
	}, functions.RunTimeout(time.Second))
	functions.Register(app, "parent", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Invoke[string](ctx, "child", "sleepy", nil).Get()
	})
	// boss invokes bounded and answers the type of the error it ends with.
	functions.Register(app, "boss", func(ctx context.Context, _ struct{}) (string, error) {
		_, err := step.Invoke[string](ctx, "child", "bounded", nil).Get()
		if se := (*step.Error)(nil); errors.As(err, &se) {
			return se.Type, nil
		}
		return "", err
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("ARunningRunIsFencedOut", func(t *testing.T) {
		t.Parallel()
		requireDeadlineFencesACall(t, s, c, "1s", false)
	})

	t.Run("ASuspendedRunFails", func(t *testing.T) {
		t.Parallel()
		id := startWith(t, c, "sleepy", protocol.StartRunParams{Timeout: ptr("1s")}).ID
		requireDeadlineExceeded(t, c, id)
		// The journaled sleep stays; the run is not invoked again.
		require.Len(t, getRun(t, c, id).Journal, 1)
	})

	t.Run("AQueuedRunFails", func(t *testing.T) {
		t.Parallel()
		// Its function refuses every call; the retry waits an hour, queued.
		refusing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) })
		register(t, s, c, "refusing", refusing, &protocol.FunctionConfig{
			Retries: &protocol.RetryPolicy{MaxAttempts: ptr(5), InitialInterval: ptr("1h"), MaxInterval: ptr("1h")}})
		deadline := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second)
		id := startWith(t, c, "refusing", protocol.StartRunParams{Deadline: &deadline}).ID
		stack.AwaitStatus(t, c, id, protocol.RunStatusQueued)
		run := requireDeadlineExceeded(t, c, id)
		require.True(t, deadline.Equal(*run.Deadline), "%s != %s", deadline, run.Deadline)
	})

	t.Run("AScheduledRunFails", func(t *testing.T) {
		t.Parallel()
		id := startWith(t, c, "sleepy", protocol.StartRunParams{Delay: ptr("1h"), Timeout: ptr("1s")}).ID
		run := requireDeadlineExceeded(t, c, id)
		require.Nil(t, run.StartedAt, "it never started")
	})

	t.Run("RunTimeoutFromTheConfig", func(t *testing.T) {
		t.Parallel()
		res := startWith(t, c, "bounded", protocol.StartRunParams{})
		run := requireDeadlineExceeded(t, c, res.ID)
		require.Equal(t, time.Second, run.Deadline.Sub(run.CreatedAt))
		// An explicit deadline later than the run_timeout does not extend it.
		res = startWith(t, c, "bounded", protocol.StartRunParams{Timeout: ptr("1h")})
		run = getRun(t, c, res.ID)
		require.Equal(t, time.Second, run.Deadline.Sub(run.CreatedAt))
	})

	t.Run("AChildInheritsItsParentsDeadline", func(t *testing.T) {
		t.Parallel()
		deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		id := startWith(t, c, "parent", protocol.StartRunParams{Deadline: &deadline}).ID
		parent := waitingOn(t, c, id, protocol.AwaitingKindInvoke)
		require.NotNil(t, parent.Awaiting.ChildID)
		child := getRun(t, c, *parent.Awaiting.ChildID)
		require.NotNil(t, child.Deadline)
		require.True(t, deadline.Equal(*child.Deadline))
		// The other tenant sees neither.
		resp, err := other.GetRunWithResponse(t.Context(), id, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode())
	})

	t.Run("AChildPastItsDeadlineWakesItsParent", func(t *testing.T) {
		t.Parallel()
		id := startWith(t, c, "boss", protocol.StartRunParams{}).ID
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		require.JSONEq(t, `"deadline_exceeded"`, string(*res.Output))
	})
}

// TestDelayedStart starts runs later through a real gateway.
func TestDelayedStart(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
	app := s.NewApp()
	functions.Register(app, "hello", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil })
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("ScheduledThenRuns", func(t *testing.T) {
		t.Parallel()
		res := startWith(t, c, "hello", protocol.StartRunParams{Delay: ptr("1s")})
		require.Equal(t, protocol.RunStatusScheduled, res.Status)
		run := getRun(t, c, res.ID)
		require.NotNil(t, run.WakeAt, "its start time")
		require.Nil(t, run.StartedAt)
		startAt := *run.WakeAt
		done := mustResult(t, c, res.ID)
		require.Equal(t, protocol.RunStatusCompleted, done.Status)
		run = getRun(t, c, res.ID)
		require.False(t, run.StartedAt.Before(startAt), "started at its time, not before")
	})

	t.Run("StartAt", func(t *testing.T) {
		t.Parallel()
		at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		res := startWith(t, c, "hello", protocol.StartRunParams{StartAt: &at})
		require.Equal(t, protocol.RunStatusScheduled, res.Status)
		run := getRun(t, c, res.ID)
		require.True(t, at.Equal(*run.WakeAt))
	})

	t.Run("CancelWhileScheduled", func(t *testing.T) {
		t.Parallel()
		res := startWith(t, c, "hello", protocol.StartRunParams{Delay: ptr("1h")})
		// Another tenant can neither see nor cancel it.
		resp, err := other.CancelRunWithResponse(t.Context(), res.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode())
		resp, err = c.CancelRunWithResponse(t.Context(), res.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		run := getRun(t, c, res.ID)
		require.Equal(t, protocol.RunStatusCancelled, run.Status)
		require.Nil(t, run.WakeAt)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		past := time.Now().Add(-time.Minute)
		tooLate := time.Now().Add(11 * 365 * 24 * time.Hour)
		tooFar := time.Now().Add(400 * 24 * time.Hour)
		for _, tc := range []struct {
			params protocol.StartRunParams
			detail string
		}{
			{protocol.StartRunParams{Delay: ptr("soon")}, `delay "soon" is not a duration`},
			{protocol.StartRunParams{Delay: ptr("9000h")}, "longer than the maximum of 8760h0m0s (1 year)"},
			{protocol.StartRunParams{StartAt: &tooFar}, "more than the maximum of 8760h0m0s (1 year)"},
			{protocol.StartRunParams{Delay: ptr("1s"), StartAt: &tooFar}, "start_at and delay cannot both be set"},
			{protocol.StartRunParams{Delay: ptr("1s"), Wait: ptr("1s")}, "wait cannot be used with a delayed start"},
			{protocol.StartRunParams{Timeout: ptr("0s")}, `timeout "0s" is not a duration from 1s to 87600h0m0s (10 years)`},
			{protocol.StartRunParams{Timeout: ptr("100000h")}, "(10 years)"},
			{protocol.StartRunParams{Deadline: &past}, "is not in the future"},
			{protocol.StartRunParams{Deadline: &tooLate}, "more than the maximum of 87600h0m0s (10 years)"},
			{protocol.StartRunParams{Deadline: &tooLate, Timeout: ptr("1h")}, "deadline and timeout cannot both be set"},
		} {
			resp := startRun(t, c, "hello", `{}`, &tc.params)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			var problem protocol.Problem
			require.NoError(t, json.Unmarshal(resp.Body, &problem))
			require.Contains(t, problem.Detail, tc.detail)
		}
		for config, detail := range map[string]string{
			`{"run_timeout":"0s"}`:                             "config.run_timeout",
			`{"run_timeout":"100000h"}`:                        "(10 years)",
			`{"max_invocation_duration":"1ms"}`:                "config.max_invocation_duration",
			`{"timeout":"10s","max_invocation_duration":"1m"}`: "longer than config.timeout",
		} {
			code, body := rawRequest(t, "PUT", s.URL+"/v1/functions/cfg", s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}),
				"application/json", strings.NewReader(fmt.Sprintf(`{"url":"http://127.0.0.1:1/","config":%s}`, config)))
			require.Equal(t, http.StatusBadRequest, code, "%s: %v", config, body)
			require.Contains(t, fmt.Sprint(body["detail"]), detail)
		}
	})
}

// TestContinue runs a function of 100 steps that allows itself a short budget per
// invocation: it stops at step boundaries with a continue and the gateway calls it
// again at once, so each step runs exactly once, over several invocations.
func TestContinue(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	var mu sync.Mutex
	runs := map[int]int{} // step -> executions
	invocations := 0
	app := s.NewApp()
	functions.Register(app, "long", func(ctx context.Context, _ struct{}) (int, error) {
		mu.Lock()
		invocations++
		mu.Unlock()
		sum := 0
		for i := range 100 {
			n, err := step.Run(ctx, fmt.Sprintf("step-%d", i), func(ctx context.Context) (int, error) {
				mu.Lock()
				runs[i]++
				mu.Unlock()
				// Work that takes a while: 100 steps take longer than one invocation's budget.
				time.Sleep(5 * time.Millisecond)
				return i, nil
			})
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	}, functions.MaxInvocationDuration(200*time.Millisecond))
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("AContinueWithoutProgressFailsTheRun", func(t *testing.T) {
		t.Parallel()
		stuck := &rawFunction{answer: func(req *protocol.InvocationRequest, _ func(string) (int, string)) string {
			return fmt.Sprintf(`{"status":"suspended","await":{"type":"continue","seq":%d,"name":"continue"}}`, len(req.Journal)+1)
		}}
		register(t, s, c, "stuck", stuck, nil)
		res := startRun(t, c, "stuck", `{}`, nil)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusFailed, res.JSON200.Status)
		require.Equal(t, "bad_answer", res.JSON200.Error.Type)
		require.Contains(t, res.JSON200.Error.Message, "journals nothing since the invocation began")
		require.EqualValues(t, 1, stuck.calls.Load())
	})

	res := mustComplete(t, c, "long", `{}`)
	require.JSONEq(t, "4950", string(*res.Output))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, 100)
	for i, n := range runs {
		require.Equal(t, 1, n, "step %d ran %d times", i, n)
	}
	// 100 steps of 5ms or more take 500ms; each invocation stops after 160ms.
	require.GreaterOrEqual(t, invocations, 3)
	run := getRun(t, c, res.ID)
	require.Equal(t, invocations, run.Invocations)
	require.Len(t, run.Journal, 100, "continue journals nothing")
}

// TestDetachedChildOutlivesItsParentsDeadline: a child started detached does not
// inherit its parent's deadline. The parent fails past its deadline while the child,
// sleeping beyond it, goes on to complete; a child that is not detached inherits it.
func TestDetachedChildOutlivesItsParentsDeadline(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "napper", func(ctx context.Context, _ struct{}) (string, error) {
		return "rested", step.Sleep(ctx, "nap", 3*time.Second)
	})
	functions.Register(app, "patron", func(ctx context.Context, detached bool) (string, error) {
		if detached {
			return step.Invoke[string](ctx, "child", "napper", nil, step.Detached()).Get()
		}
		return step.Invoke[string](ctx, "child", "napper", nil).Get()
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	resp := startRun(t, c, "patron", `true`, &protocol.StartRunParams{Timeout: ptr("1s")})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	id := resp.JSON202.ID
	childID := *waitingOn(t, c, id, protocol.AwaitingKindInvoke).Awaiting.ChildID
	child := getRun(t, c, childID)
	require.True(t, *child.Detached)
	require.Nil(t, child.Deadline, "a detached child has no deadline of its parent's")
	parent := requireDeadlineExceeded(t, c, id)
	res := mustResult(t, c, childID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
	require.JSONEq(t, `"rested"`, string(*res.Output))
	child = getRun(t, c, childID)
	require.True(t, child.FinishedAt.After(*parent.Deadline), "the child ran past its parent's deadline")
	// Its end is not journaled in the parent, which ended first.
	parent = getRun(t, c, id)
	require.Equal(t, protocol.RunStatusFailed, parent.Status)
	require.Empty(t, parent.Journal)

	// Not detached, the child inherits the deadline and fails with its parent.
	resp = startRun(t, c, "patron", `false`, &protocol.StartRunParams{Timeout: ptr("1s")})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	id = resp.JSON202.ID
	childID = *waitingOn(t, c, id, protocol.AwaitingKindInvoke).Awaiting.ChildID
	parent = requireDeadlineExceeded(t, c, id)
	child = requireDeadlineExceeded(t, c, childID)
	require.True(t, parent.Deadline.Equal(*child.Deadline))
}

// TestDeadlinesKeptByTimers runs functions past their deadlines with their River jobs
// deleted: the gateway's timers alone fail them (armed by the gateway that created the
// run, or by a maintenance pass when the deadline was beyond its lead), not River's
// scheduler, which promotes a scheduled job up to 5 s late.
func TestDeadlinesKeptByTimers(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "sleepy", func(ctx context.Context, _ struct{}) (string, error) {
		return "woke", step.Sleep(ctx, "nap", time.Hour)
	})
	functions.Register(app, "parent", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Invoke[string](ctx, "child", "sleepy", nil).Get()
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("ASleepingRun", func(t *testing.T) {
		t.Parallel()
		id := startWith(t, c, "sleepy", protocol.StartRunParams{Timeout: ptr("2s")}).ID
		dropDeadlineJob(t, s, id)
		requireDeadlineExceeded(t, c, id)
	})

	t.Run("ARunningStep", func(t *testing.T) {
		t.Parallel()
		requireDeadlineFencesACall(t, s, c, "2s", true)
	})

	t.Run("ArmedByTheMaintenancePass", func(t *testing.T) {
		t.Parallel()
		// 5 s is beyond the passes' lead (two passes, 2 s here): the gateway that
		// creates the run leaves its deadline to them.
		id := startWith(t, c, "sleepy", protocol.StartRunParams{Timeout: ptr("5s")}).ID
		dropDeadlineJob(t, s, id)
		requireDeadlineExceeded(t, c, id)
	})

	t.Run("AChild", func(t *testing.T) {
		t.Parallel()
		id := startWith(t, c, "parent", protocol.StartRunParams{Timeout: ptr("3s")}).ID
		dropDeadlineJob(t, s, id)
		parent := waitingOn(t, c, id, protocol.AwaitingKindInvoke)
		childID := *parent.Awaiting.ChildID
		dropDeadlineJob(t, s, childID)
		requireDeadlineExceeded(t, c, childID)
		requireDeadlineExceeded(t, c, id)
	})
}

// dropDeadlineJob deletes the River job that keeps run id's deadline when no gateway's
// timer does, before a worker takes it, so that only the timers can keep it. (On a
// loaded machine the job may already be due, available, when the test gets here: not
// yet worked, it is dropped all the same.)
func dropDeadlineJob(t *testing.T, s *stack.Stack, id string) {
	t.Helper()
	tag, err := s.Pool.Exec(t.Context(), `
		DELETE FROM river_job WHERE kind = 'stepgate.deadline' AND args->>'run_id' = $1 AND state IN ('scheduled', 'available')`, id)
	require.NoError(t, err)
	if tag.RowsAffected() != 1 {
		rows, _ := s.Pool.Query(t.Context(), `SELECT kind, state::text, scheduled_at::text, args::text FROM river_job WHERE args->>'run_id' = $1`, id)
		jobs, err := pgx.CollectRows(rows, pgx.RowToMap)
		t.Fatalf("run %s's deadline job, not yet worked: not found (the run's jobs: %v, %v)", id, jobs, err)
	}
}

// TestDeadlineLateness measures how late runs end past their deadlines, on the database
// clock (finished_at - deadline): 50 runs with a 2 s deadline that sleep 60 s, and 50
// whose 2 s deadline cuts a step that runs for 60 s. It logs p50 and p99 of each (run
// it with -v; the figures are in docs/benchmarks-history.md, "Deadlines on time") and asserts
// no timing: every run ends deadline_exceeded, none before its deadline.
func TestDeadlineLateness(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "sleeper", func(ctx context.Context, _ struct{}) (string, error) {
		return "woke", step.Sleep(ctx, "nap", time.Minute)
	})
	functions.Register(app, "grinder", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "grind", func(ctx context.Context) (string, error) {
			select { // the invocation's context ends when the deadline fences it out
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			return "ground", nil
		})
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	for _, function := range []string{"sleeper", "grinder"} {
		ids := make([]string, 50)
		for i := range ids {
			ids[i] = startWith(t, c, function, protocol.StartRunParams{Timeout: ptr("2s")}).ID
		}
		for _, id := range ids {
			requireDeadlineExceeded(t, c, id)
		}
		late := lateness(t, s, ids)
		require.Len(t, late, len(ids))
		slices.Sort(late)
		require.GreaterOrEqual(t, late[0], time.Duration(0), "a run ended before its deadline")
		t.Logf("%s: %d runs past a 2s deadline: lateness p50 %s, p99 %s, max %s", function, len(late),
			late[len(late)/2], late[(len(late)*99+99)/100-1], late[len(late)-1])
	}
}

// lateness returns how late each of the runs ids ended past its deadline, on the
// database clock (finished_at - deadline), in microseconds.
func lateness(t *testing.T, s *stack.Stack, ids []string) []time.Duration {
	t.Helper()
	rows, err := s.Pool.Query(t.Context(), `
		SELECT (extract(epoch FROM finished_at - deadline) * 1e6)::bigint FROM stepgate.run WHERE id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	micros, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	late := make([]time.Duration, len(micros))
	for i, us := range micros {
		late[i] = time.Duration(us) * time.Microsecond
	}
	return late
}

// requireDeadlineFencesACall starts a function "blocking" whose call blocks, with
// ?timeout=timeout (its River deadline job dropped when timersOnly, so that only the
// gateways' timers can keep the deadline), waits for the run to fail
// deadline_exceeded, then lets the call go on: its late checkpoint is refused (409) and
// its answer dropped, so the run stays failed with nothing journaled.
func requireDeadlineFencesACall(t *testing.T, s *stack.Stack, c *protocol.ClientWithResponses, timeout string, timersOnly bool) {
	t.Helper()
	started := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	late := make(chan int, 1) // the late checkpoint's status
	blocking := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		close(started)
		<-release
		code, _ := checkpoint(`{"seq":1,"kind":"step","name":"late","output":1}`)
		late <- code
		return `{"status":"completed","output":"late"}`
	}}
	register(t, s, c, "blocking", blocking, nil)
	t.Cleanup(releaseOnce) // before the server's Close, which waits for the blocked call
	id := startWith(t, c, "blocking", protocol.StartRunParams{Timeout: ptr(timeout)}).ID
	if timersOnly {
		dropDeadlineJob(t, s, id)
	}
	<-started
	run := requireDeadlineExceeded(t, c, id)
	releaseOnce()
	require.Equal(t, http.StatusConflict, <-late, "the late checkpoint is refused")
	after := getRun(t, c, id)
	require.Equal(t, protocol.RunStatusFailed, after.Status)
	require.Equal(t, run.Error.Message, after.Error.Message)
	require.Empty(t, after.Journal)
}
