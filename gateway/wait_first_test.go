package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// firstOutcome is what the WaitFirst functions below answer: the index chosen and what
// came with it.
type firstOutcome struct {
	Index int    `json:"index"`
	Got   string `json:"got"`
}

// TestWaitFirst runs functions that wait for the first of several futures, and for all
// of them, through a real gateway.
func TestWaitFirst(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()

	type keyed struct {
		Key     string `json:"key"`
		Timeout string `json:"timeout"`
	}
	// eventOrTimer waits for wf.paid of its key, or its timeout's timer.
	functions.Register(app, "wf.event_or_timer", func(ctx context.Context, in keyed) (firstOutcome, error) {
		d, _ := time.ParseDuration(in.Timeout)
		paid := step.WaitForEvent[keyed](ctx, "paid", "wf.paid", step.Matching(step.Match{"data.key": in.Key}))
		i, err := step.WaitFirst(ctx, "paid-or-late", paid, step.After(ctx, "late", d))
		if err != nil || i != 0 {
			return firstOutcome{Index: i}, err
		}
		ev, err := paid.Get()
		return firstOutcome{Index: i, Got: ev.Data.Key}, err
	})

	// msgOrCallback waits for a message of topic "go" or its callback's resolution;
	// whichever did not come is waited for after, alone.
	functions.Register(app, "wf.msg_or_callback", func(ctx context.Context, _ noInput) ([]firstOutcome, error) {
		cb, err := step.Callback[string](ctx, "approval")
		if err != nil {
			return nil, err
		}
		msg := step.Receive[string](ctx, "go")
		i, err := step.WaitFirst(ctx, "approval", msg, cb.Result())
		if err != nil {
			return nil, err
		}
		var out []firstOutcome
		for _, j := range []int{i, 1 - i} { // the one chosen (resolved), then the other
			var got string
			if j == 0 {
				m, err := msg.Get()
				if err != nil {
					return nil, err
				}
				got = "message " + m.Data
			} else {
				d, err := cb.Result().Get()
				if err != nil {
					return nil, err
				}
				got = "callback " + d
			}
			out = append(out, firstOutcome{Index: j, Got: got})
		}
		return out, nil
	})

	// replayed waits for the first of an event, a timer and a message (the timer in the
	// middle: the gateway's alternatives are the event and the message), then fails a
	// step once, so that its next invocation replays the wait; every invocation reports
	// the index it saw.
	var seenMu sync.Mutex
	seen := map[string][]int{}
	functions.Register(app, "wf.replayed", func(ctx context.Context, in keyed) (firstOutcome, error) {
		paid := step.WaitForEvent[keyed](ctx, "paid", "wf.paid", step.Matching(step.Match{"data.key": in.Key}))
		msg := step.Receive[string](ctx, "go")
		i, err := step.WaitFirst(ctx, "first", paid, step.After(ctx, "hour", time.Hour), msg)
		if err != nil {
			return firstOutcome{}, err
		}
		seenMu.Lock()
		seen[in.Key] = append(seen[in.Key], i)
		seenMu.Unlock()
		if _, err := step.Run(ctx, "flaky", func(ctx context.Context) (int, error) {
			if step.Attempt(ctx) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return 1, nil
		}, step.MaxAttempts(2), step.Backoff(time.Millisecond, time.Millisecond)); err != nil {
			return firstOutcome{}, err
		}
		if i != 2 {
			return firstOutcome{Index: i}, nil
		}
		m, err := msg.Get()
		return firstOutcome{Index: i, Got: m.Data}, err
	})

	// parallel starts two steps; the second finishes at once, the first only once
	// WaitFirst has returned. WaitFirst's choice is journaled: the replay (after a
	// failed step) picks the same, although both steps are journaled then.
	var parallelSeen []int
	functions.Register(app, "wf.parallel", func(ctx context.Context, _ noInput) (int, error) {
		release := make(chan struct{})
		slow := step.Go(ctx, "slow", func(ctx context.Context) (string, error) {
			if functions.RunFrom(ctx).Attempt == 1 {
				<-release
			}
			return "slow", nil
		})
		fast := step.Go(ctx, "fast", func(ctx context.Context) (string, error) { return "fast", nil })
		i, err := step.WaitFirst(ctx, "first", slow, fast)
		close(release)
		if err != nil {
			return 0, err
		}
		seenMu.Lock()
		parallelSeen = append(parallelSeen, i)
		seenMu.Unlock()
		if err := step.WaitAll(ctx, slow, fast); err != nil {
			return 0, err
		}
		if _, err := step.Run(ctx, "flaky", func(ctx context.Context) (int, error) {
			if step.Attempt(ctx) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return 1, nil
		}, step.MaxAttempts(2), step.Backoff(time.Millisecond, time.Millisecond)); err != nil {
			return 0, err
		}
		return i, nil
	})

	// wf.child tells the test it started, then waits until the test lets it end.
	started := make(chan string, 4)
	var releaseOnce sync.Once
	releaseChildren := make(chan struct{})
	functions.Register(app, "wf.child", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (int, error) {
		started <- functions.RunFrom(ctx).ID
		select {
		case <-releaseChildren:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return in.N * 10, nil
	})
	var allCalls atomic.Int32
	functions.Register(app, "wf.all", func(ctx context.Context, _ noInput) (string, error) {
		allCalls.Add(1)
		label := step.Go(ctx, "label", func(ctx context.Context) (string, error) { return "label", nil })
		a := step.Invoke[int](ctx, "child-a", "wf.child", map[string]int{"n": 1})
		b := step.Invoke[int](ctx, "child-b", "wf.child", map[string]int{"n": 2})
		if err := step.WaitAll(ctx, a, label, b); err != nil {
			return "", err
		}
		l, _ := label.Get()
		x, _ := a.Get()
		y, _ := b.Get()
		return fmt.Sprintf("%s %d %d", l, x, y), nil
	})

	// refusals tries what WaitFirst and the options refuse, and answers the errors;
	// none takes a seq, so the step after them is seq 1.
	functions.Register(app, "wf.refusals", func(ctx context.Context, _ noInput) ([]string, error) {
		ev := func() *step.Future[step.Event[any]] { return step.WaitForEvent[any](ctx, "ev", "wf.never") }
		var out []string
		for _, try := range []func() error{
			func() error {
				_, err := step.WaitFirst(ctx, "child", ev(), step.Invoke[int](ctx, "c", "wf.child", nil))
				return err
			},
			func() error {
				g := step.Go(ctx, "g", func(context.Context) (int, error) { return 1, nil })
				_, err := step.WaitFirst(ctx, "mixed", g, ev())
				_ = step.WaitAll(ctx, g) // a step started with Go is waited for before the answer
				return err
			},
			func() error {
				var many []step.Waitable
				for i := range 9 {
					many = append(many, step.Receive[any](ctx, fmt.Sprintf("t%d", i)))
				}
				_, err := step.WaitFirst(ctx, "many", append(many, step.After(ctx, "a", time.Hour), step.After(ctx, "b", time.Hour))...)
				return err
			},
			func() error {
				_, err := step.Run(ctx, "r", func(context.Context) (int, error) { return 1, nil }, step.Timeout(time.Hour))
				return err
			},
			func() error {
				_, err := step.WaitForEvent[any](ctx, "w", "wf.never", step.Detached()).Get()
				return err
			},
			func() error {
				_, err := step.Invoke[int](ctx, "i", "wf.child", nil, step.MaxAttempts(2)).Get()
				return err
			},
		} {
			err := try()
			if !step.IsNonRetryable(err) {
				return nil, fmt.Errorf("want a non-retryable error, got %v", err)
			}
			out = append(out, err.Error())
		}
		return out, nil
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	// Let the children end before the app's server stops (a cleanup registered after
	// its own, so run before it), should the test fail before it lets them.
	t.Cleanup(func() { releaseOnce.Do(func() { close(releaseChildren) }) })

	outcome := func(t *testing.T, id string, v any) {
		t.Helper()
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		require.NoError(t, json.Unmarshal(*res.Output, v))
	}
	paid := func(key string) protocol.EventReceipt {
		return mustSendEvent(t, c, protocol.EventSend{Name: "wf.paid", Data: new(protocol.AnyJSON(fmt.Sprintf(`{"key":%q}`, key)))})
	}
	wait := func(t *testing.T, id string) protocol.RunDetail {
		t.Helper()
		return waitingOn(t, c, id, protocol.AwaitingKindWaitAny)
	}

	t.Run("TheEventComesBeforeTheTimer", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.event_or_timer", `{"key":"k-ev","timeout":"1h"}`)
		run := wait(t, id)
		require.Len(t, *run.Awaiting.Of, 1, "the timer is the wait's timeout, not an alternative")
		require.Equal(t, []string{id}, *paid("k-ev").Resumed)
		var got firstOutcome
		outcome(t, id, &got)
		require.Equal(t, firstOutcome{Index: 0, Got: "k-ev"}, got)
	})

	t.Run("TheTimerWins", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.event_or_timer", `{"key":"k-late","timeout":"1s"}`)
		var got firstOutcome
		outcome(t, id, &got)
		require.Equal(t, firstOutcome{Index: 1}, got)
		require.Nil(t, paid("k-late").Resumed, "the event's wait ended with the timer")
	})

	t.Run("TheMessageComesFirstAndTheCallbackIsWaitedForAfter", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.msg_or_callback", `{}`)
		wait(t, id)
		mustSendMessage(t, c, id, protocol.MessageSend{Topic: "go", Data: new(protocol.AnyJSON(`"now"`))})
		// The callback was not chosen: the run waits for it anew, and it still resolves.
		waitingOn(t, c, id, protocol.AwaitingKindAwaitCallback)
		resp, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`"yes"`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		var got []firstOutcome
		outcome(t, id, &got)
		require.Equal(t, []firstOutcome{{0, "message now"}, {1, "callback yes"}}, got)
	})

	t.Run("TheCallbackComesFirstAndTheMessageIsNotTaken", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.msg_or_callback", `{}`)
		wait(t, id)
		resp, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`"yes"`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		waitingOn(t, c, id, protocol.AwaitingKindReceive)
		mustSendMessage(t, c, id, protocol.MessageSend{Topic: "go", Data: new(protocol.AnyJSON(`"later"`))})
		var got []firstOutcome
		outcome(t, id, &got)
		require.Equal(t, []firstOutcome{{1, "callback yes"}, {0, "message later"}}, got)
	})

	t.Run("AReplayPicksTheSameIndex", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.replayed", `{"key":"k-replay"}`)
		wait(t, id)
		mustSendMessage(t, c, id, protocol.MessageSend{Topic: "go", Data: new(protocol.AnyJSON(`"m"`))})
		var got firstOutcome
		outcome(t, id, &got)
		require.Equal(t, firstOutcome{Index: 2, Got: "m"}, got, "the message, third of the futures")
		seenMu.Lock()
		defer seenMu.Unlock()
		require.Equal(t, []int{2, 2}, seen["k-replay"], "the invocation after the failed step replayed the choice")
		run := getRun(t, c, id)
		require.Equal(t, protocol.EntryKindWaitAny, run.Journal[0].Kind)
		require.Equal(t, "first", run.Journal[0].Name)
	})

	t.Run("ParallelStepsReplayTheJournaledIndex", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.parallel", `{}`)
		var got int
		outcome(t, id, &got)
		require.Equal(t, 1, got, "the fast step finished first")
		seenMu.Lock()
		require.Equal(t, []int{1, 1}, parallelSeen, "the replay, with both steps journaled, picked the journaled one")
		seenMu.Unlock()
		run := getRun(t, c, id)
		require.Equal(t, []string{"slow", "fast", "first", "flaky"}, entryNames(run.Journal))
		require.JSONEq(t, `1`, string(*run.Journal[2].Output))
	})

	t.Run("WaitAllStartsTheChildrenAtOnce", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.all", `{}`)
		run := waitingOn(t, c, id, protocol.AwaitingKindInvokeAll)
		require.Equal(t, 2, *run.Awaiting.Count)
		// Both children run before either ends: started one after the other, the second
		// would start only once the first had ended.
		children := map[string]bool{}
		for len(children) < 2 {
			select {
			case child := <-started:
				children[child] = true
			case <-time.After(30 * time.Second):
				t.Fatalf("%d of the 2 children started", len(children))
			}
		}
		releaseOnce.Do(func() { close(releaseChildren) })
		var got string
		outcome(t, id, &got)
		require.Equal(t, "label 10 20", got)
		require.EqualValues(t, 2, allCalls.Load(), "called once more, when both children had ended")
		run = getRun(t, c, id)
		require.Equal(t, []string{"label", "child-a", "child-a"}, entryNames(run.Journal), "the children are journaled under the first one's name")
	})

	t.Run("BadCombinationsAreRefused", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wf.refusals", `{}`)
		var got []string
		outcome(t, id, &got)
		want := []string{
			`future 1 is a child run (Invoke "c"), which WaitFirst cannot wait for`,
			`mixes 1 steps started with Go, which run in this process, with 1 waits the gateway keeps`,
			`9 waits besides timers (receives of one topic counted once), more than 8`,
			`option Timeout does not apply to Run (it takes MaxAttempts, Backoff, Lazy)`,
			`option Detached does not apply to WaitForEvent (it takes Matching, Timeout, SinceStart, Since)`,
			`option MaxAttempts does not apply to Invoke (it takes Detached)`,
		}
		require.Len(t, got, len(want))
		for i, w := range want {
			require.Contains(t, got[i], w)
		}
		run := getRun(t, c, id)
		require.Equal(t, []string{"g"}, entryNames(run.Journal), "only the step started with Go took a seq")
		require.True(t, strings.HasPrefix(got[0], "step: WaitFirst \"child\""), got[0])
	})
}

// TestWaitFirstBoundsAreTheGateways keeps the Go SDK's bounds of WaitFirst and WaitAll
// equal to the gateway's: the longest wait_any timeout, its alternatives, the children
// of an invoke_all.
func TestWaitFirstBoundsAreTheGateways(t *testing.T) {
	t.Parallel()
	require.Equal(t, invoker.MaxSleep, step.WaitFirstTimeout)
	require.Equal(t, journal.MaxAlternatives, step.MaxWaitFirst)
	require.Equal(t, journal.MaxInvokeAll, step.MaxInvokeAll)
}
