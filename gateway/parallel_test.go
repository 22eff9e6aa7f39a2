package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

type noInput struct{}

// meet returns a barrier for n parties: each call blocks until all n have called it, or
// fails after a deadline (the parties did not run at the same time).
func meet(n int) func(ctx context.Context) error {
	var arrived atomic.Int32
	all := make(chan struct{})
	return func(ctx context.Context) error {
		if arrived.Add(1) == int32(n) {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
			return errors.New("the parallel steps did not run at the same time")
		}
	}
}

// TestParallelSteps runs step.Go and step.All through a real gateway: steps that run at
// the same time, finish out of order, and are each journaled once at the seq they took.
func TestParallelSteps(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()

	// together: three steps that can only finish if all three run at once, finishing in
	// reverse order (c, then b, then a), and a sequential step after them.
	var runs [3]atomic.Int32
	together := meet(3)
	var orderMu sync.Mutex
	var order []int
	finished := func() []int { orderMu.Lock(); defer orderMu.Unlock(); return slices.Clone(order) }
	functions.Register(app, "together", func(ctx context.Context, _ noInput) ([]string, error) {
		cDone, bDone := make(chan struct{}), make(chan struct{})
		part := func(i int, after, done chan struct{}) func(context.Context) (string, error) {
			return func(ctx context.Context) (string, error) {
				runs[i].Add(1)
				if err := together(ctx); err != nil {
					return "", step.NonRetryable(err)
				}
				if after != nil {
					<-after
				}
				orderMu.Lock()
				order = append(order, i)
				orderMu.Unlock()
				if done != nil {
					defer close(done)
				}
				return fmt.Sprintf("part %d", i), nil
			}
		}
		fs := []*step.Future[string]{
			step.Go(ctx, "a", part(0, bDone, nil)),
			step.Go(ctx, "b", part(1, cDone, bDone)),
			step.Go(ctx, "c", part(2, nil, cDone)),
		}
		out, err := step.All(fs...)
		if err != nil {
			return nil, err
		}
		last, err := step.Run(ctx, "after", func(context.Context) (string, error) { return "after", nil })
		return append(out, last), err
	})

	// flaky: two parallel steps; "slow" fails its first attempt after "quick" finished,
	// so the run suspends for its retry with "quick" journaled, and the next invocation
	// replays "quick" and runs "slow" again.
	var quick, slow atomic.Int32
	functions.Register(app, "flaky", func(ctx context.Context, _ noInput) (string, error) {
		quickDone := make(chan struct{})
		q := step.Go(ctx, "quick", func(context.Context) (string, error) {
			defer close(quickDone)
			quick.Add(1)
			return "q", nil
		})
		sl := step.Go(ctx, "slow", func(ctx context.Context) (string, error) {
			if step.Attempt(ctx) == 1 {
				<-quickDone
				slow.Add(1)
				return "", errors.New("a blip")
			}
			slow.Add(1)
			return "s", nil
		}, step.Backoff(time.Millisecond, time.Millisecond))
		out, err := step.All(q, sl)
		return strings.Join(out, "+"), err
	})

	// overlap: a sequential step checkpointed while a parallel one still runs (a
	// windowed checkpoint past a hole), then the parallel one's outcome.
	functions.Register(app, "overlap", func(ctx context.Context, _ noInput) (string, error) {
		release := make(chan struct{})
		bg := step.Go(ctx, "background", func(ctx context.Context) (string, error) {
			select {
			case <-release:
				return "bg", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
		fg, err := step.Run(ctx, "foreground", func(context.Context) (string, error) { return "fg", nil })
		if err != nil {
			return "", err
		}
		close(release)
		b, err := bg.Get()
		return fg + "," + b, err
	})

	// nested: a step started with a parallel step's context is refused.
	functions.Register(app, "nested", func(ctx context.Context, _ noInput) (string, error) {
		f := step.Go(ctx, "outer", func(ctx context.Context) (string, error) {
			return step.Run(ctx, "inner", func(context.Context) (string, error) { return "x", nil })
		})
		return f.Get()
	})

	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("StepsRunTogetherAndReplayInSeqOrder", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "together", `{}`)
		require.JSONEq(t, `["part 0","part 1","part 2","after"]`, string(*res.Output))
		for i := range runs {
			require.EqualValues(t, 1, runs[i].Load(), "step %d ran once", i)
		}
		run := getRun(t, c, res.ID)
		require.Equal(t, []string{"a", "b", "c", "after"}, entryNames(run.Journal))
		for i, e := range run.Journal {
			require.Equal(t, i+1, e.Seq)
		}
		require.Equal(t, []int{2, 1, 0}, finished(), "c finished first, then b, then a: each at the seq it took")
	})

	t.Run("AFailedStepKeepsTheFinishedOnes", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "flaky", `{}`)
		require.JSONEq(t, `"q+s"`, string(*res.Output))
		require.EqualValues(t, 1, quick.Load(), "quick was journaled before the retry, and replayed after it")
		require.EqualValues(t, 2, slow.Load())
		run := getRun(t, c, res.ID)
		require.Equal(t, []string{"quick", "slow"}, entryNames(run.Journal))
		require.Equal(t, 2, *run.Journal[1].Attempt)
		require.Len(t, run.Failures, 1)
		require.Equal(t, "a blip", run.Failures[0].Error.Message)
		require.Equal(t, 2, run.Failures[0].Seq)
		require.Equal(t, 2, run.Invocations, "one retry of the invocation")
	})

	t.Run("ASequentialStepPassesARunningOne", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "overlap", `{}`)
		require.JSONEq(t, `"fg,bg"`, string(*res.Output))
		run := getRun(t, c, res.ID)
		require.Equal(t, []string{"background", "foreground"}, entryNames(run.Journal))
	})

	t.Run("NoStepInsideAParallelStep", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "nested", `{}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status)
		require.Contains(t, resp.JSON200.Error.Message, "inside the function of parallel step 1")
	})
}

func entryNames(j []protocol.JournalEntry) []string {
	out := make([]string, 0, len(j))
	for _, e := range j {
		out = append(out, e.Name)
	}
	return out
}

// TestCheckpointWindows: without the SDK, a function may checkpoint out of order only
// within the window it declares; the journal's byte count stays exact when a hole is
// filled (its limit holds across holes).
func TestCheckpointWindows(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	type outcome struct {
		code int
		body string
	}
	results := make(chan []outcome, 1)
	entries := []string{
		`{"seq":1,"kind":"step","name":"a","output":1}`,
		`{"seq":3,"kind":"step","name":"c","output":3}`,             // a hole at 2, no window
		`{"seq":3,"kind":"step","name":"c","output":3,"window":2}`,  // within the window
		`{"seq":6,"kind":"step","name":"f","output":6,"window":2}`,  // nothing journaled at 4 or 5
		`{"seq":6,"kind":"step","name":"f","output":6,"window":65}`, // past the bound
		`{"seq":6,"kind":"step","name":"f","output":6,"window":0}`,  // not a window
		`{"seq":2,"kind":"step","name":"b","output":2}`,             // a fill needs a window
		`{"seq":2,"kind":"step","name":"b","output":2,"window":2}`,  // the hole filled
		`{"seq":4,"kind":"step","name":"d","output":4}`,
	}
	var f *rawFunction
	f = &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		if f.calls.Load() > 1 {
			// The run ends only once the hole at 5 is filled.
			return `{"status":"completed","output":"done","steps":[{"seq":5,"kind":"step","name":"e","output":5,"window":2}]}`
		}
		var got []outcome
		for _, e := range entries {
			code, body := checkpoint(e)
			got = append(got, outcome{code, body})
		}
		results <- got
		// An await may declare a window too: seq 6 is past the hole at 5.
		return `{"status":"suspended","await":{"type":"sleep","seq":6,"name":"nap","duration":"1ms","window":2}}`
	}}
	register(t, s, c, "windows", f, nil)
	resp := startRun(t, c, "windows", `{}`, &protocol.StartRunParams{Wait: ptr("0s")})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	got := <-results
	for i, want := range []struct {
		code   int
		detail string
	}{
		{200, ""},
		{400, "seq 3 is not the journal's next (seq 2 is not journaled)"},
		{200, ""},
		{400, "seq 6 is past its window of 2 (no seq from 4 to 5 is journaled)"},
		{400, "window 65 is not from 1 to 64"},
		{400, "window 0 is not from 1 to 64"},
		{400, "seq 2 fills a hole below later entries"},
		{200, ""},
		{200, ""},
	} {
		require.Equal(t, want.code, got[i].code, "%s: %s", entries[i], got[i].body)
		require.Contains(t, got[i].body, want.detail, entries[i])
	}
	res := mustResult(t, c, resp.JSON202.ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
	run := getRun(t, c, res.ID)
	require.Equal(t, []string{"a", "b", "c", "d", "e", "nap"}, entryNames(run.Journal))
	require.Equal(t, 5, run.Journal[4].Seq, "the hole at 5, left while the run slept, filled as it completed")
}

// TestInvokeAll starts several child runs at once and resumes the parent once, when the
// last of them has ended, with each outcome at its own seq.
func TestInvokeAll(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	var parentCalls atomic.Int32
	release := make(chan struct{})
	type item struct {
		N    int  `json:"n"`
		Fail bool `json:"fail"`
		Wait bool `json:"wait"`
	}
	functions.Register(app, "square", func(ctx context.Context, in item) (int, error) {
		if in.Wait {
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		if in.Fail {
			return 0, step.NonRetryable(errors.New("no square today"))
		}
		return in.N * in.N, nil
	})
	functions.Register(app, "fanout", func(ctx context.Context, _ noInput) ([]string, error) {
		parentCalls.Add(1)
		children := []*step.Future[int]{
			step.Invoke[int](ctx, "squares", "square", item{N: 2}),
			step.Invoke[int](ctx, "squares", "square", item{N: 3, Wait: true}),
			step.Invoke[int](ctx, "squares", "square", item{N: 4, Fail: true}),
			step.Invoke[int](ctx, "squares", "missing", nil),
		}
		outs, _ := step.All(children...) // each child's error is its own, read below
		var res []string
		for i, c := range children {
			if _, err := c.Get(); err != nil {
				var se *step.Error
				if errors.As(err, &se) {
					res = append(res, se.Type)
					continue
				}
				return nil, err
			}
			res = append(res, fmt.Sprint(outs[i]))
		}
		return res, nil
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	id := startAsync(t, c, "fanout", `{}`)
	run := waitingOn(t, c, id, protocol.AwaitingKindInvokeAll)
	require.Equal(t, 4, *run.Awaiting.Count)
	// Every child but the waiting one ends; the parent still waits for it.
	waitUntil(t, 30*time.Second, func() bool { return len(getRun(t, c, id).Journal) == 3 }, "three children journaled")
	run = getRun(t, c, id)
	require.Equal(t, protocol.RunStatusSuspended, run.Status, "it waits for the last child")
	require.EqualValues(t, 1, parentCalls.Load())
	close(release)
	res := mustResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
	require.JSONEq(t, `["4","9","non_retryable","not_found"]`, string(*res.Output))
	require.EqualValues(t, 2, parentCalls.Load(), "called once more, when the last child ended")
	run = getRun(t, c, id)
	require.Equal(t, []string{"squares", "squares", "squares", "squares"}, entryNames(run.Journal))
	for i, e := range run.Journal {
		require.Equal(t, i+1, e.Seq)
		require.Equal(t, protocol.EntryKindInvoke, e.Kind)
	}

	// A malicious answer: too many calls, or none, fails the run with a bad answer.
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, _ func(string) (int, string)) string {
		calls := strings.Repeat(`{"function":"square"},`, 65)
		return `{"status":"suspended","await":{"type":"invoke_all","seq":1,"name":"x","calls":[` + strings.TrimSuffix(calls, ",") + `]}}`
	}}
	register(t, s, c, "greedy", f, nil)
	e := mustFail(t, c, "greedy")
	require.Contains(t, e.Message, "starts 65 child runs, more than the limit of 64")
}
