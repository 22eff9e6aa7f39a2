package functions_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// next is a replay-only answer's next.
func next(seq int, kind, name string) protocol.ReplayOutcome {
	return protocol.ReplayOutcome{Next: &protocol.ReplayStep{Seq: seq, Kind: kind, Name: name}}
}

// journaled is an entry of kind named name at seq, with an output.
func journaled(seq int, kind protocol.EntryKind, name string) protocol.JournalEntry {
	e := entry(seq, name, `1`)
	e.Kind = kind
	return e
}

const runUUID = "6f1c2a3e-0b7d-4c5e-9f8a-1b2c3d4e5f60"

// TestReplayOnly checks that a replay-only invocation (InvocationRequest replay_only)
// says what the code asks for past its journal, or where it asks for something else,
// and that no path runs a step's function, waits, claims the run or sends anything to
// the gateway: every step body and compensation counts into ran, and the fake gateway
// counts every request to the checkpoint URL.
func TestReplayOnly(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	count := func(ctx context.Context) (int, error) { ran.Add(1); return 1, nil }
	steps := func(ctx context.Context, names ...string) error {
		for _, n := range names {
			if _, err := step.Run(ctx, n, count); err != nil {
				return err
			}
		}
		return nil
	}
	cases := []struct {
		name    string
		journal []protocol.JournalEntry
		fn      func(ctx context.Context) error
		opts    []functions.Option
		want    protocol.ReplayOutcome
	}{
		{
			name:    "StepPastJournal",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), entry(2, "b", `1`)},
			fn:      func(ctx context.Context) error { return steps(ctx, "a", "b", "c") },
			want:    next(3, "step", "c"),
		},
		{
			name:    "Divergence",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn:      func(ctx context.Context) error { return steps(ctx, "b") },
			want: protocol.ReplayOutcome{Divergence: &protocol.ReplayDivergence{Seq: 1,
				Journal: protocol.ReplayStep{Seq: 1, Kind: "step", Name: "a"},
				Asked:   protocol.ReplayStep{Seq: 1, Kind: "step", Name: "b"}}},
		},
		{
			name:    "KindDivergence",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), journaled(2, protocol.EntryKindSleep, "nap")},
			fn: func(ctx context.Context) error {
				return errors.Join(steps(ctx, "a"), step.SendEvent(ctx, "nap", 1))
			},
			want: protocol.ReplayOutcome{Divergence: &protocol.ReplayDivergence{Seq: 2,
				Journal: protocol.ReplayStep{Seq: 2, Kind: "sleep", Name: "nap"},
				Asked:   protocol.ReplayStep{Seq: 2, Kind: "event", Name: "nap"}}},
		},
		{
			// The sleep would be waited out in the process, checkpointed: it is not.
			name:    "SleepInProcess",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			opts:    []functions.Option{functions.SleepInProcess(time.Hour)},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				return step.Sleep(ctx, "nap", time.Millisecond)
			},
			want: next(2, "sleep", "nap"),
		},
		{
			name:    "Sleep",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), journaled(2, protocol.EntryKindSleep, "nap")},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
					return err
				}
				return step.Sleep(ctx, "nap2", 2*time.Hour)
			},
			want: next(3, "sleep", "nap2"),
		},
		{
			name: "WaitEvent",
			fn: func(ctx context.Context) error {
				_, err := step.WaitForEvent[any](ctx, "paid", "payment").Get()
				return err
			},
			want: next(1, "wait_event", "paid"),
		},
		{
			name: "Receive",
			fn: func(ctx context.Context) error {
				_, err := step.Receive[any](ctx, "inbox").Get()
				return err
			},
			want: next(1, "receive", "inbox"),
		},
		{
			name: "Invoke",
			fn: func(ctx context.Context) error {
				_, err := step.Invoke[int](ctx, "child", "other", nil).Get()
				return err
			},
			want: next(1, "invoke", "child"),
		},
		{
			name: "InvokeAll",
			fn: func(ctx context.Context) error {
				return step.WaitAll(ctx, step.Invoke[int](ctx, "children", "other", 1), step.Invoke[int](ctx, "children", "other", 2))
			},
			want: next(1, "invoke", "children"),
		},
		{
			name: "WaitFirst",
			fn: func(ctx context.Context) error {
				_, err := step.WaitFirst(ctx, "either", step.WaitForEvent[any](ctx, "paid", "payment"), step.After(ctx, "hour", time.Hour))
				return err
			},
			want: next(1, "wait_any", "either"),
		},
		{
			// The journal chose an alternative of another kind than the code waits for.
			name: "WaitFirstAlternative",
			journal: []protocol.JournalEntry{{Seq: 1, Kind: protocol.EntryKindWaitAny, Name: "either",
				Output: new(protocol.AnyJSON(`{"index":0,"kind":"receive","output":{"timed_out":true}}`))}},
			fn: func(ctx context.Context) error {
				_, err := step.WaitFirst(ctx, "either", step.WaitForEvent[any](ctx, "paid", "payment"), step.After(ctx, "hour", time.Hour))
				return err
			},
			want: protocol.ReplayOutcome{Divergence: &protocol.ReplayDivergence{Seq: 1,
				Journal: protocol.ReplayStep{Seq: 1, Kind: "receive", Name: "either"},
				Asked:   protocol.ReplayStep{Seq: 1, Kind: "wait_any", Name: "either"}}},
		},
		{
			name:    "Completed",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), entry(2, "b", `1`)},
			fn:      func(ctx context.Context) error { return steps(ctx, "a", "b") },
			want:    next(3, "end", "completed"),
		},
		{
			name:    "Failed",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				return step.NonRetryable(errors.New("no"))
			},
			want: next(2, "end", "failed"),
		},
		{
			// The code ends where the journal goes on.
			name:    "EndsBeforeJournal",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), entry(2, "b", `1`)},
			fn:      func(ctx context.Context) error { return steps(ctx, "a") },
			want: protocol.ReplayOutcome{Divergence: &protocol.ReplayDivergence{Seq: 2,
				Journal: protocol.ReplayStep{Seq: 2, Kind: "step", Name: "b"},
				Asked:   protocol.ReplayStep{Seq: 2, Kind: "end", Name: "completed"}}},
		},
		{
			// A failure runs the compensations, each a step: the first is what comes next.
			name:    "Compensation",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn: func(ctx context.Context) error {
				if err := step.Compensate(ctx, "undo", func(context.Context) error { ran.Add(1); return nil }); err != nil {
					return err
				}
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				return step.Rollback(ctx, errors.New("no"))
			},
			want: next(2, "step", "compensate undo"),
		},
		{
			name:    "SendEvent",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn: func(ctx context.Context) error {
				return errors.Join(steps(ctx, "a"), step.SendEvent(ctx, "shipped", 1))
			},
			want: next(2, "event", "shipped"),
		},
		{
			name: "SetValue",
			fn:   func(ctx context.Context) error { return step.SetValue(ctx, "progress", 1) },
			want: next(1, "value", "progress"),
		},
		{
			name: "Callback",
			fn: func(ctx context.Context) error {
				_, err := step.Callback[any](ctx, "approve")
				return err
			},
			want: next(1, "callback", "approve"),
		},
		{
			name: "Send",
			fn:   func(ctx context.Context) error { return step.Send(ctx, runUUID, "topic", 1) },
			want: next(1, "send", "topic"),
		},
		{
			name: "Reply",
			fn:   func(ctx context.Context) error { return step.Reply(ctx, "req-1", 1) },
			want: next(1, "reply", "req-1"),
		},
		{
			// A parallel step past the journal: its goroutine never starts.
			name:    "Go",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn: func(ctx context.Context) error {
				a := step.Go(ctx, "a", count)
				b := step.Go(ctx, "b", count)
				return step.WaitAll(ctx, a, b)
			},
			want: next(2, "step", "b"),
		},
		{
			name:    "WaitFirstOfGo",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), entry(2, "b", `1`)},
			fn: func(ctx context.Context) error {
				_, err := step.WaitFirst(ctx, "first", step.Go(ctx, "a", count), step.Go(ctx, "b", count))
				return err
			},
			want: next(3, "step", "first"),
		},
		{
			name: "Now",
			fn: func(ctx context.Context) error {
				_, err := step.Now(ctx, "now")
				return err
			},
			want: next(1, "step", "now"),
		},
		{
			name: "UUID",
			fn: func(ctx context.Context) error {
				_, err := step.UUID(ctx, "id")
				return err
			},
			want: next(1, "step", "id"),
		},
		{
			name: "Random",
			fn: func(ctx context.Context) error {
				_, err := step.Random(ctx, "dice")
				return err
			},
			want: next(1, "step", "dice"),
		},
		{
			name:    "Patched",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				if _, err := step.Patched(ctx, "fix"); err != nil {
					return err
				}
				return steps(ctx, "b")
			},
			want: next(2, "patch", "fix"),
		},
		{
			name:    "PatchedReplayed",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), journaled(2, protocol.EntryKindPatch, "fix")},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				if patched, err := step.Patched(ctx, "fix"); err != nil || !patched {
					return errors.Join(err, errors.New("not patched"))
				}
				return steps(ctx, "b")
			},
			want: next(3, "step", "b"),
		},
		{
			// A run that went past the patch on older code replays the old path.
			name:    "PatchOldPath",
			journal: []protocol.JournalEntry{entry(1, "a", `1`), entry(2, "old", `1`)},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				patched, err := step.Patched(ctx, "fix")
				if err != nil {
					return err
				}
				if patched {
					return steps(ctx, "new", "c")
				}
				return steps(ctx, "old", "c")
			},
			want: next(3, "step", "c"),
		},
		{
			// A stream write is not an entry: skipped, and the code goes on.
			name:    "Stream",
			journal: []protocol.JournalEntry{entry(1, "a", `1`)},
			fn: func(ctx context.Context) error {
				if err := steps(ctx, "a"); err != nil {
					return err
				}
				w, err := step.Stream(ctx, "log")
				if err != nil {
					return err
				}
				if err := w.Send("hello"); err != nil {
					return err
				}
				return steps(ctx, "b")
			},
			want: next(2, "step", "b"),
		},
		{
			// Code that swallows every panic cannot change the answer.
			name: "RecoverGeneric",
			fn: func(ctx context.Context) (err error) {
				defer func() {
					if recover() != nil {
						err = nil
					}
				}()
				return steps(ctx, "a")
			},
			want: next(1, "step", "a"),
		},
	}
	g, url := serve(t, func(app *functions.App) {
		for _, c := range cases {
			functions.Register(app, c.name, func(ctx context.Context, _ empty) (int, error) {
				return 1, c.fn(ctx)
			}, c.opts...)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runID := "run-" + c.name
			for _, e := range c.journal {
				code, msg := g.Append(runID, e)
				require.Equal(t, http.StatusOK, code, msg)
			}
			req := gatewaytest.ReplayOnly(g.Request(runID, c.name, `{}`))
			req.Deadline = new(time.Now().Add(24 * time.Hour))
			r := g.Invoke(url+"/"+c.name, req)
			require.Equal(t, http.StatusOK, r.Code, string(r.Body))
			require.Equal(t, protocol.AnswerStatusReplayed, r.Answer.Status, string(r.Body))
			require.NotNil(t, r.Answer.Replay, string(r.Body))
			require.Equal(t, c.want, *r.Answer.Replay, string(r.Body))
			require.Nil(t, r.Answer.Steps)
			require.Nil(t, r.Answer.Await)
			require.Zero(t, g.Calls(runID), "nothing checkpointed, claimed or streamed")
			require.Equal(t, append([]protocol.JournalEntry{}, c.journal...), append([]protocol.JournalEntry{}, g.Journal(runID)...))
			stream, _ := g.Stream(runID, "log")
			require.Empty(t, stream)
		})
	}
	require.Zero(t, ran.Load(), "no step function or compensation ran")
}

// TestReplayOnlyThenInvoke checks that a normal invocation of the same journal is
// unchanged: it claims the run, runs the step past the journal and checkpoints it.
func TestReplayOnlyThenInvoke(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "three", func(ctx context.Context, _ empty) (int, error) {
			for _, n := range []string{"a", "b", "c"} {
				if _, err := step.Run(ctx, n, func(context.Context) (int, error) { ran.Add(1); return 1, nil }); err != nil {
					return 0, err
				}
			}
			return 3, nil
		})
	})
	for _, e := range []protocol.JournalEntry{entry(1, "a", `1`), entry(2, "b", `1`)} {
		code, msg := g.Append("run-1", e)
		require.Equal(t, http.StatusOK, code, msg)
	}

	r := g.Invoke(url+"/three", gatewaytest.ReplayOnly(g.Request("run-1", "three", `{}`)))
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Equal(t, protocol.AnswerStatusReplayed, r.Answer.Status, string(r.Body))
	require.Equal(t, next(3, "step", "c"), *r.Answer.Replay)
	require.Zero(t, ran.Load())
	require.Zero(t, g.CurrentChecks("run-1"))

	r = g.Invoke(url+"/three", g.Request("run-1", "three", `{}`))
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	require.Nil(t, r.Answer.Replay)
	require.JSONEq(t, `3`, string(*r.Answer.Output))
	require.Equal(t, int64(1), ran.Load(), "step c ran once")
	require.Equal(t, 1, g.CurrentChecks("run-1"), "the run was claimed before step c")
	require.Len(t, g.Journal("run-1"), 3)
}

// TestReplayOnlyRetryableError checks that a replay-only invocation whose code returns
// a retryable error past its journal answers HTTP 500, as any invocation does: replaying
// says nothing there, and it answers no completed or failed status the gateway would
// apply.
func TestReplayOnlyRetryableError(t *testing.T) {
	t.Parallel()
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "flaky", func(ctx context.Context, _ empty) (int, error) {
			if _, err := step.Run(ctx, "a", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			return 0, errors.New("try again")
		})
	})
	code, msg := g.Append("run-1", entry(1, "a", `1`))
	require.Equal(t, http.StatusOK, code, msg)
	r := g.Invoke(url+"/flaky", gatewaytest.ReplayOnly(g.Request("run-1", "flaky", `{}`)))
	require.Equal(t, http.StatusInternalServerError, r.Code, string(r.Body))
	require.Equal(t, "try again", r.Error.Message)
	require.Zero(t, g.Calls("run-1"))
}
