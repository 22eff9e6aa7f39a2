package step_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// chosen is what the functions below answer: the index WaitFirst chose and what Get of
// that future returned.
type chosen struct {
	Index    int    `json:"index"`
	Got      string `json:"got,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Err      string `json:"err,omitempty"`
}

// serveFirst serves one function, "f", which hands the futures futures makes to
// WaitFirst named "first" and answers the index it chose and what that future's Get
// returned (then, each future of more, waited for in order, with its Get).
func serveFirst(t *testing.T, futures func(ctx context.Context) []step.Waitable) (*gatewaytest.Gateway, string) {
	t.Helper()
	app := functions.New(functions.Config{InsecureSkipVerify: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	functions.Register(app, "f", func(ctx context.Context, _ struct{}) (chosen, error) {
		fs := futures(ctx)
		i, err := step.WaitFirst(ctx, "first", fs...)
		if err != nil {
			return chosen{Index: i, Err: err.Error(), TimedOut: errors.Is(err, step.ErrTimedOut)}, nil
		}
		return outcome(i, fs[i]), nil
	})
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	return gatewaytest.New(t, nil), srv.URL + "/f"
}

// outcome is Get of f, the future at index i.
func outcome(i int, f step.Waitable) chosen {
	var got any
	var err error
	switch f := f.(type) {
	case *step.Future[struct{}]:
		_, err = f.Get()
		got = "timer"
	case *step.Future[step.Message[string]]:
		var m step.Message[string]
		m, err = f.Get()
		got = m.Data
	case *step.Future[step.Event[string]]:
		var ev step.Event[string]
		ev, err = f.Get()
		got = ev.Data
	default:
		panic(fmt.Sprintf("no Get for %T", f))
	}
	c := chosen{Index: i, Got: fmt.Sprint(got)}
	if err != nil {
		c.Got, c.Err, c.TimedOut = "", err.Error(), errors.Is(err, step.ErrTimedOut)
	}
	return c
}

func decode(t *testing.T, r gatewaytest.Response) chosen {
	t.Helper()
	require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	var c chosen
	require.NoError(t, json.Unmarshal(*r.Answer.Output, &c))
	return c
}

func timedOutAt(seq int) protocol.JournalEntry {
	return protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindWaitAny, Name: "first", Output: new(protocol.AnyJSON(`{"timed_out":true}`))}
}

func message(seq, index int, data string) protocol.JournalEntry {
	out := fmt.Sprintf(`{"index":%d,"kind":"receive","output":{"message":{"id":"m-1","topic":"t","data":%q,"identity":{"subject":"ann","tenant":"acme","roles":[]},"sent_at":"2026-12-01T00:00:00Z"}}}`, index, data)
	return protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindWaitAny, Name: "first", Output: new(protocol.AnyJSON(out))}
}

// invoke invokes "f" of run id with its journal so far, n times, and checks that each
// answer is the same.
func invoke(t *testing.T, g *gatewaytest.Gateway, url, id string, n int) gatewaytest.Response {
	t.Helper()
	r := g.Invoke(url, g.Request(id, "f", `{}`))
	for range n - 1 {
		again := g.Invoke(url, g.Request(id, "f", `{}`))
		require.JSONEq(t, string(r.Body), string(again.Body), "every invocation answers the same")
	}
	return r
}

func timeoutOf(t *testing.T, aw *protocol.Await) time.Duration {
	t.Helper()
	require.NotNil(t, aw.Timeout)
	d, err := time.ParseDuration(*aw.Timeout)
	require.NoError(t, err)
	return d
}

// TestWaitFirstDeadlines checks that WaitFirst takes several timers and waits with their
// own Timeout: the earliest deadline is the wait_any's timeout, and when the wait times
// out a replay chooses that future from values fixed in the code or journaled, never
// from the clock.
func TestWaitFirstDeadlines(t *testing.T) {
	t.Parallel()

	t.Run("TheEarliestDurationIsTheTimeoutAndWinsATie", func(t *testing.T) {
		t.Parallel()
		g, url := serveFirst(t, func(ctx context.Context) []step.Waitable {
			return []step.Waitable{
				step.WaitForEvent[string](ctx, "paid", "orders.paid"),
				step.After(ctx, "late", 2*time.Hour),
				step.Receive[string](ctx, "t", step.Timeout(30*time.Minute)),
				step.After(ctx, "soon", 30*time.Minute),
			}
		})
		r := invoke(t, g, url, "run-1", 1)
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		aw := r.Answer.Await
		require.Equal(t, protocol.AwaitTypeWaitAny, aw.Type)
		require.Equal(t, 1, aw.Seq, "no other seq taken")
		require.Equal(t, "30m0s", *aw.Timeout)
		require.Len(t, *aw.Of, 2, "the timers are the timeout, not alternatives")
		for _, o := range *aw.Of {
			require.Nil(t, o.Timeout, "an alternative has the wait_any's timeout")
		}
		require.Equal(t, protocol.AwaitTypeReceive, (*aw.Of)[1].Type)

		g.Append("run-1", timedOutAt(1))
		got := decode(t, invoke(t, g, url, "run-1", 3))
		require.Equal(t, 2, got.Index, "the receive's own 30m ties the 30m timer, and comes first in order")
		require.True(t, got.TimedOut, "its Get returns its timeout: %+v", got)
		require.Contains(t, got.Err, `timed out: receive 1 "first"`)
	})

	t.Run("TimesCompareAlike", func(t *testing.T) {
		t.Parallel()
		base := time.Now()
		g, url := serveFirst(t, func(ctx context.Context) []step.Waitable {
			return []step.Waitable{
				step.Receive[string](ctx, "t"),
				step.At(ctx, "later", base.Add(2*time.Hour)),
				step.At(ctx, "sooner", base.Add(time.Hour)),
			}
		})
		r := invoke(t, g, url, "run-1", 1)
		require.Equal(t, 1, r.Answer.Await.Seq, "no time journaled for times alone")
		d := timeoutOf(t, r.Answer.Await)
		require.Greater(t, d, 59*time.Minute)
		require.LessOrEqual(t, d, time.Hour)
		g.Append("run-1", timedOutAt(1))
		require.Equal(t, chosen{Index: 2, Got: "timer"}, decode(t, invoke(t, g, url, "run-1", 3)))
	})

	t.Run("DurationsAndTimesJournalTheTimeTheyCountFrom", func(t *testing.T) {
		t.Parallel()
		at := time.Now().Add(2 * time.Hour)
		g, url := serveFirst(t, func(ctx context.Context) []step.Waitable {
			return []step.Waitable{
				step.Receive[string](ctx, "t"),
				step.At(ctx, "deadline", at),
				step.After(ctx, "hour", time.Hour),
			}
		})
		before := time.Now()
		r := invoke(t, g, url, "run-1", 1)
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.NotNil(t, r.Answer.Steps, "the time rides with the answer")
		require.Len(t, *r.Answer.Steps, 1)
		from := (*r.Answer.Steps)[0]
		require.Equal(t, 1, from.Seq)
		require.Equal(t, protocol.EntryKindStep, from.Kind)
		require.Equal(t, "first", from.Name)
		var t0 time.Time
		require.NoError(t, json.Unmarshal(*from.Output, &t0))
		require.False(t, t0.Before(before.Truncate(time.Microsecond)), "the time it waits from")
		aw := r.Answer.Await
		require.Equal(t, protocol.AwaitTypeWaitAny, aw.Type)
		require.Equal(t, 2, aw.Seq)
		d := timeoutOf(t, aw)
		require.Greater(t, d, 59*time.Minute, "the hour's, sooner than the deadline in 2h")
		require.LessOrEqual(t, d, time.Hour)
		g.Append("run-1", timedOutAt(2))
		require.Equal(t, chosen{Index: 2, Got: "timer"}, decode(t, invoke(t, g, url, "run-1", 3)))
	})

	t.Run("AReplayComparesFromTheJournaledTimeNotTheClock", func(t *testing.T) {
		t.Parallel()
		// Waited for from 2020-01-01: the hour passes at 01:00, before a deadline at 02:00
		// and after one at 00:30. By the clock of any replay both deadlines are long past,
		// which would make At the first in order.
		t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, tc := range []struct {
			deadline time.Time
			want     int
		}{
			{t0.Add(2 * time.Hour), 2},
			{t0.Add(30 * time.Minute), 1},
			{t0.Add(time.Hour), 1}, // a tie: the lowest index
		} {
			g, url := serveFirst(t, func(ctx context.Context) []step.Waitable {
				return []step.Waitable{
					step.Receive[string](ctx, "t"),
					step.At(ctx, "deadline", tc.deadline),
					step.After(ctx, "hour", time.Hour),
				}
			})
			g.Append("run-1", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindStep, Name: "first", Output: new(protocol.AnyJSON(`"2020-01-01T00:00:00Z"`))})
			g.Append("run-1", timedOutAt(2))
			require.Equal(t, chosen{Index: tc.want, Got: "timer"}, decode(t, invoke(t, g, url, "run-1", 3)), "deadline %s", tc.deadline)
		}
	})

	t.Run("AWaitsOwnTimeoutAgainstATime", func(t *testing.T) {
		t.Parallel()
		t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
		g, url := serveFirst(t, func(ctx context.Context) []step.Waitable {
			return []step.Waitable{
				step.At(ctx, "deadline", t0.Add(2*time.Hour)),
				step.WaitForEvent[string](ctx, "paid", "orders.paid", step.Timeout(90*time.Minute)),
			}
		})
		g.Append("run-1", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindStep, Name: "first", Output: new(protocol.AnyJSON(`"2020-01-01T00:00:00Z"`))})
		g.Append("run-1", timedOutAt(2))
		got := decode(t, invoke(t, g, url, "run-1", 3))
		require.Equal(t, 1, got.Index)
		require.True(t, got.TimedOut, "%+v", got)
		require.Contains(t, got.Err, `timed out: wait 2 "first"`)
	})

	t.Run("ReceivesOfOneTopicAreOneAlternative", func(t *testing.T) {
		t.Parallel()
		app := functions.New(functions.Config{InsecureSkipVerify: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		functions.Register(app, "f", func(ctx context.Context, _ struct{}) ([]chosen, error) {
			a := step.Receive[string](ctx, "t")
			ev := step.WaitForEvent[string](ctx, "paid", "orders.paid")
			b := step.Receive[string](ctx, "t", step.Timeout(time.Hour))
			fs := []step.Waitable{a, ev, b}
			i, err := step.WaitFirst(ctx, "first", fs...)
			if err != nil {
				return nil, err
			}
			out := []chosen{outcome(i, fs[i])}
			if i == 0 {
				out = append(out, outcome(2, b)) // not chosen: waits anew
			}
			return out, nil
		})
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		url := srv.URL + "/f"

		g := gatewaytest.New(t, nil)
		r := g.Invoke(url, g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		of := *r.Answer.Await.Of
		require.Len(t, of, 2, "one receive of the topic, and the event")
		require.Equal(t, "t", *of[0].Topic)
		require.Equal(t, protocol.AwaitTypeWaitEvent, of[1].Type)
		require.Equal(t, "1h0m0s", *r.Answer.Await.Timeout, "the second receive's own timeout")

		// A message ends the first receive; the second waits anew, at the next seq.
		g.Append("run-1", message(1, 0, "hello"))
		r = invoke(t, g, url, "run-1", 2)
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		aw := r.Answer.Await
		require.Equal(t, protocol.AwaitTypeReceive, aw.Type)
		require.Equal(t, 2, aw.Seq)
		require.Equal(t, "t", *aw.Topic)
		require.Equal(t, "1h0m0s", *aw.Timeout, "its own timeout, alone")
		g.Append("run-1", protocol.JournalEntry{Seq: 2, Kind: protocol.EntryKindReceive, Name: "t",
			Output: new(protocol.AnyJSON(`{"message":{"id":"m-2","topic":"t","data":"again","identity":{"subject":"ann","tenant":"acme","roles":[]},"sent_at":"2026-12-01T00:00:00Z"}}`))})
		r = invoke(t, g, url, "run-1", 2)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `[{"index":0,"got":"hello"},{"index":2,"got":"again"}]`, string(*r.Answer.Output))

		// Its own timeout, first to pass, chooses the second.
		g.Append("run-2", timedOutAt(1))
		r = invoke(t, g, url, "run-2", 2)
		require.JSONEq(t, `[{"index":2,"timed_out":true,"err":"step: timed out: receive 1 \"first\""}]`, string(*r.Answer.Output), string(r.Body))
	})

	t.Run("TimersAloneAreTheEarliestsGet", func(t *testing.T) {
		t.Parallel()
		g, url := serveFirst(t, func(ctx context.Context) []step.Waitable {
			return []step.Waitable{step.After(ctx, "a", 2*time.Hour), step.After(ctx, "b", time.Hour), step.After(ctx, "c", time.Hour)}
		})
		r := invoke(t, g, url, "run-1", 2)
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.Equal(t, protocol.AwaitTypeSleep, r.Answer.Await.Type)
		require.Equal(t, "b", r.Answer.Await.Name)
		require.Equal(t, "1h0m0s", *r.Answer.Await.Duration)
		g.Append("run-1", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindSleep, Name: "b"})
		require.Equal(t, chosen{Index: 1, Got: "timer"}, decode(t, invoke(t, g, url, "run-1", 2)))
	})

	t.Run("EightWaitsBesidesTimersAndRepeatedTopics", func(t *testing.T) {
		t.Parallel()
		many := func(ctx context.Context, n int) []step.Waitable {
			fs := []step.Waitable{step.After(ctx, "late", time.Hour)}
			for i := range n {
				fs = append(fs, step.Receive[string](ctx, fmt.Sprintf("t%d", i)), step.Receive[string](ctx, fmt.Sprintf("t%d", i)))
			}
			return fs
		}
		g, url := serveFirst(t, func(ctx context.Context) []step.Waitable { return many(ctx, step.MaxWaitFirst) })
		r := invoke(t, g, url, "run-1", 1)
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.Len(t, *r.Answer.Await.Of, step.MaxWaitFirst)

		g, url = serveFirst(t, func(ctx context.Context) []step.Waitable { return many(ctx, step.MaxWaitFirst+1) })
		got := decode(t, invoke(t, g, url, "run-1", 1))
		require.Equal(t, `step: WaitFirst "first": 9 waits besides timers (receives of one topic counted once), more than 8`, got.Err)
		require.Empty(t, g.Journal("run-1"), "refused before taking a seq")
	})
}

// TestWaitFirstStillRefuses checks what WaitFirst still refuses, before taking a seq.
func TestWaitFirstStillRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		futures func(ctx context.Context) []step.Waitable
		err     string
	}{
		{"AChildRun", func(ctx context.Context) []step.Waitable {
			return []step.Waitable{step.After(ctx, "late", time.Hour), step.Invoke[int](ctx, "c", "child", nil)}
		}, `step: WaitFirst "first": future 1 is a child run (Invoke "c"), which WaitFirst cannot wait for`},
		{"StepsStartedWithGoAndWaits", func(ctx context.Context) []step.Waitable {
			g := step.Go(ctx, "g", func(context.Context) (int, error) { return 1, nil })
			_ = step.WaitAll(ctx, g)
			return []step.Waitable{g, step.Receive[string](ctx, "t")}
		}, `step: WaitFirst "first": mixes 1 steps started with Go, which run in this process, with 1 waits the gateway keeps`},
		{"AFutureMadeWithAnError", func(ctx context.Context) []step.Waitable {
			return []step.Waitable{step.Receive[string](ctx, "t", step.MaxAttempts(2))}
		}, `step: WaitFirst "first": future 0: step: option MaxAttempts does not apply to Receive (it takes Timeout)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, url := serveFirst(t, tc.futures)
			got := decode(t, invoke(t, g, url, "run-1", 1))
			require.Equal(t, -1, got.Index)
			require.True(t, strings.HasPrefix(got.Err, tc.err), "%s\nwant the prefix %s", got.Err, tc.err)
			for _, e := range g.Journal("run-1") {
				require.Equal(t, protocol.EntryKindStep, e.Kind, "only the step started with Go took a seq")
			}
		})
	}
}
