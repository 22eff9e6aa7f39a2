package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// lookbackInput is the input of lookbackFunction's runs.
type lookbackInput struct {
	// Await is the await it answers (seq and name are filled in, in its alternatives too).
	Await map[string]any `json:"await"`
	// Gate: it first receives a message of topic "go" (seq 1), so that the test stores
	// events after the run was created and before the invocation that waits started.
	Gate bool `json:"gate"`
	// Replay: after the wait, it receives a message of topic "again", and then answers
	// {"replayed": <the wait's entry, as the last invocation's journal holds it>}.
	Replay bool `json:"replay"`
}

// lookbackFunction is a function written from the protocol alone (the SDKs do not ask
// for a look-back yet): it answers its input's await at seq 1 (2 with a gate) and then
// completes with the wait's entry.
func lookbackFunction() *rawFunction {
	suspend := func(await map[string]any) string {
		b, _ := json.Marshal(map[string]any{"status": "suspended", "await": await})
		return string(b)
	}
	return &rawFunction{answer: func(req *protocol.InvocationRequest, _ func(string) (int, string)) string {
		var in lookbackInput
		if err := json.Unmarshal(req.Run.Input, &in); err != nil {
			return fmt.Sprintf(`{"status":"failed","error":{"type":"input","message":%q}}`, err.Error())
		}
		j := req.Journal
		seq := 1
		if in.Gate {
			if len(j) == 0 {
				return suspend(map[string]any{"type": "receive", "seq": 1, "name": "go", "topic": "go"})
			}
			seq = 2
		}
		if len(j) < seq {
			in.Await["seq"], in.Await["name"] = seq, "waited"
			if of, ok := in.Await["of"].([]any); ok {
				for _, o := range of {
					o.(map[string]any)["seq"], o.(map[string]any)["name"] = seq, "waited"
				}
			}
			return suspend(in.Await)
		}
		waited := *j[seq-1].Output
		if !in.Replay {
			return fmt.Sprintf(`{"status":"completed","output":%s}`, waited)
		}
		if len(j) == seq {
			return suspend(map[string]any{"type": "receive", "seq": seq + 1, "name": "again", "topic": "again"})
		}
		return fmt.Sprintf(`{"status":"completed","output":{"replayed":%s}}`, waited)
	}}
}

// waitedEvent is the id of the event a wait_event entry's output holds, or "" when it
// timed out.
func waitedEvent(t *testing.T, out protocol.AnyJSON) string {
	t.Helper()
	var w struct {
		TimedOut bool `json:"timed_out"`
		Event    struct {
			ID string `json:"id"`
		} `json:"event"`
	}
	require.NoError(t, json.Unmarshal(out, &w), string(out))
	return w.Event.ID
}

// lookbackRun starts a run of lookback with in, and returns its id.
func lookbackRun(t *testing.T, c *protocol.ClientWithResponses, in lookbackInput) string {
	t.Helper()
	b, err := json.Marshal(in)
	require.NoError(t, err)
	return startAsync(t, c, "lookback", string(b))
}

// paidAwait is a wait_event for lb.paid of order, with the look-back fields of look.
func paidAwait(order string, look map[string]any) map[string]any {
	a := map[string]any{"type": "wait_event", "event": "lb.paid", "match": map[string]any{"data.order_id": order}, "timeout": "1h"}
	for k, v := range look {
		a[k] = v
	}
	return a
}

// sendPaid sends lb.paid of order, with id, as the client's tenant.
func sendPaid(t *testing.T, c *protocol.ClientWithResponses, id, order string) {
	t.Helper()
	mustSendEvent(t, c, protocol.EventSend{Name: "lb.paid", ID: &id, Data: ptr(protocol.AnyJSON(fmt.Sprintf(`{"order_id":%q}`, order)))})
}

// eventCreatedAt returns when the client's tenant's event id of name was stored.
func eventCreatedAt(t *testing.T, c *protocol.ClientWithResponses, name, id string) time.Time {
	t.Helper()
	resp, err := c.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: &name, Limit: ptr(500)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	for _, ev := range resp.JSON200.Events {
		if ev.ID == id {
			return ev.CreatedAt
		}
	}
	require.Failf(t, "event not listed", "%s %s", name, id)
	return time.Time{}
}

// TestWaitEventLookBack: a wait_event with a look-back (since_start, since) takes an
// event stored before the wait, through a real gateway and Postgres.
func TestWaitEventLookBack(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
	register(t, s, c, "lookback", lookbackFunction(), nil)
	register(t, s, other, "lookback", lookbackFunction(), nil)

	t.Run("StartThenSendLosesNothingWithSinceStart", func(t *testing.T) {
		t.Parallel()
		var runs, without []string
		for i := range 10 {
			order := fmt.Sprintf("o-start-%d", i)
			runs = append(runs, lookbackRun(t, c, lookbackInput{Await: paidAwait(order, map[string]any{"since_start": true})}))
			sendPaid(t, c, "start-"+order, order) // at once: the run may not wait yet
			// The same without a look-back, for the log: it loses those that come
			// before its invocation.
			order = fmt.Sprintf("o-lost-%d", i)
			without = append(without, lookbackRun(t, c, lookbackInput{Await: paidAwait(order, map[string]any{"timeout": "1s"})}))
			sendPaid(t, c, "lost-"+order, order)
		}
		for i, id := range runs {
			res := mustResult(t, c, id)
			require.Equal(t, protocol.RunStatusCompleted, res.Status, "run %d: %+v", i, res.Error)
			require.Equal(t, fmt.Sprintf("start-o-start-%d", i), waitedEvent(t, *res.Output), "run %d", i)
		}
		got := 0
		for _, id := range without {
			if waitedEvent(t, *mustResult(t, c, id).Output) != "" {
				got++
			}
		}
		t.Logf("start then send at once: since_start received 10 of 10; without a look-back %d of 10", got)
	})

	t.Run("WithoutLookBackAnEventBeforeTheInvocationIsNotTaken", func(t *testing.T) {
		t.Parallel()
		// The event is stored after the run was created, before the invocation that
		// waits started: only since_start takes it.
		without := lookbackRun(t, c, lookbackInput{Gate: true, Await: paidAwait("o-old", nil)})
		with := lookbackRun(t, c, lookbackInput{Gate: true, Await: paidAwait("o-new", map[string]any{"since_start": true})})
		waitingOn(t, c, without, protocol.AwaitingKindReceive)
		waitingOn(t, c, with, protocol.AwaitingKindReceive)
		sendPaid(t, c, "old-1", "o-old")
		sendPaid(t, c, "new-1", "o-new")
		mustSendMessage(t, c, without, protocol.MessageSend{Topic: "go"})
		mustSendMessage(t, c, with, protocol.MessageSend{Topic: "go"})

		res := mustResult(t, c, with)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		require.Equal(t, "new-1", waitedEvent(t, *res.Output))

		run := waitingFor(t, c, without)
		require.Equal(t, 2, run.Awaiting.Seq, "it waits: the event came before its invocation")
		receipt := mustSendEvent(t, c, protocol.EventSend{Name: "lb.paid", ID: ptr("old-2"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-old"}`))})
		require.Equal(t, []string{without}, *receipt.Resumed)
		require.Equal(t, "old-2", waitedEvent(t, *mustResult(t, c, without).Output))
	})

	t.Run("SinceATimeTakesTheFirstEventAtOrAfterIt", func(t *testing.T) {
		t.Parallel()
		for i := 1; i <= 3; i++ {
			sendPaid(t, c, fmt.Sprintf("since-%d", i), "o-since")
		}
		second := eventCreatedAt(t, c, "lb.paid", "since-2")
		for _, tc := range []struct {
			since time.Time
			want  string
		}{
			{second, "since-2"},
			{second.Add(-time.Microsecond), "since-2"},
			{second.Add(time.Microsecond), "since-3"},
		} {
			id := lookbackRun(t, c, lookbackInput{Await: paidAwait("o-since", map[string]any{"since": tc.since.Format(time.RFC3339Nano)})})
			res := mustResult(t, c, id)
			require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
			require.Equal(t, tc.want, waitedEvent(t, *res.Output), "since %s", tc.since.Format(time.RFC3339Nano))
		}
	})

	t.Run("AnotherTenantsEventIsNeverTaken", func(t *testing.T) {
		t.Parallel()
		id := lookbackRun(t, c, lookbackInput{Gate: true, Await: paidAwait("o-tenant", map[string]any{"since_start": true})})
		waitingOn(t, c, id, protocol.AwaitingKindReceive)
		sendPaid(t, other, "tenant-t2", "o-tenant") // same name, same data, another tenant
		mustSendMessage(t, c, id, protocol.MessageSend{Topic: "go"})
		run := waitingFor(t, c, id)
		require.Equal(t, 2, run.Awaiting.Seq)
		// Nor with since, as far back as the retention allows.
		since := lookbackRun(t, c, lookbackInput{Await: paidAwait("o-tenant", map[string]any{
			"since": time.Now().Add(-24 * time.Hour).Format(time.RFC3339Nano)})})
		waitingFor(t, c, since)
		// Not even the other tenant's own look-back takes it from here: its run gets its own.
		theirs := lookbackRun(t, other, lookbackInput{Await: paidAwait("o-tenant", map[string]any{
			"since": time.Now().Add(-24 * time.Hour).Format(time.RFC3339Nano)})})
		require.Equal(t, "tenant-t2", waitedEvent(t, *mustResult(t, other, theirs).Output))

		receipt := mustSendEvent(t, c, protocol.EventSend{Name: "lb.paid", ID: ptr("tenant-t1"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-tenant"}`))})
		require.ElementsMatch(t, []string{id, since}, *receipt.Resumed)
		require.Equal(t, "tenant-t1", waitedEvent(t, *mustResult(t, c, id).Output))
		require.Equal(t, "tenant-t1", waitedEvent(t, *mustResult(t, c, since).Output))
	})

	t.Run("AWaitAnyAlternativeLooksBackFirstInOrder", func(t *testing.T) {
		t.Parallel()
		id := lookbackRun(t, c, lookbackInput{Gate: true, Await: map[string]any{"type": "wait_any", "timeout": "1h", "of": []any{
			map[string]any{"type": "receive", "topic": "never"},
			map[string]any{"type": "wait_event", "event": "lb.b", "match": map[string]any{"data.order_id": "o-any"}, "since_start": true},
			map[string]any{"type": "wait_event", "event": "lb.a", "match": map[string]any{"data.order_id": "o-any"}, "since_start": true},
		}}})
		waitingOn(t, c, id, protocol.AwaitingKindReceive)
		// lb.a is stored first, but lb.b's alternative comes first in of.
		mustSendEvent(t, c, protocol.EventSend{Name: "lb.a", ID: ptr("any-a"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-any"}`))})
		mustSendEvent(t, c, protocol.EventSend{Name: "lb.b", ID: ptr("any-b"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-any"}`))})
		mustSendMessage(t, c, id, protocol.MessageSend{Topic: "go"})
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		var out struct {
			Index  int              `json:"index"`
			Kind   string           `json:"kind"`
			Output protocol.AnyJSON `json:"output"`
		}
		require.NoError(t, json.Unmarshal(*res.Output, &out))
		require.Equal(t, 1, out.Index)
		require.Equal(t, "wait_event", out.Kind)
		require.Equal(t, "any-b", waitedEvent(t, out.Output))
		// No alternative is left waiting, and the mailbox was not touched.
		require.Nil(t, getRun(t, c, id).Awaiting)
	})

	t.Run("AReplayReturnsTheSameEvent", func(t *testing.T) {
		t.Parallel()
		sendPaid(t, c, "replay-1", "o-replay")
		id := lookbackRun(t, c, lookbackInput{Replay: true, Await: paidAwait("o-replay", map[string]any{
			"since": time.Now().Add(-time.Hour).Format(time.RFC3339Nano)})})
		waitingOn(t, c, id, protocol.AwaitingKindReceive)
		// A later matching event: a look-back evaluated again would now take it (the
		// first is the run's already).
		sendPaid(t, c, "replay-2", "o-replay")
		mustSendMessage(t, c, id, protocol.MessageSend{Topic: "again"})
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		var out struct {
			Replayed protocol.AnyJSON `json:"replayed"`
		}
		require.NoError(t, json.Unmarshal(*res.Output, &out))
		require.Equal(t, "replay-1", waitedEvent(t, out.Replayed))
		j := getRun(t, c, id).Journal
		require.Equal(t, protocol.EntryKindWaitEvent, j[0].Kind)
		require.Equal(t, "replay-1", waitedEvent(t, *j[0].Output))
	})
}

// TestWaitEventLookBackBounds: a look-back's since further back than the event
// retention, or after the database clock, or with since_start, fails the run
// (bad_answer) with a message naming the bound, without a retry.
func TestWaitEventLookBackBounds(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Retention: 48 * time.Hour})
	c := s.Client(t, s.Token)
	wait := func(look string) string {
		return `{"type":"wait_event","seq":1,"name":"w","event":"e"` + look + `}`
	}
	beyond := time.Now().Add(-49 * time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, await, message string
	}{
		{"BeyondRetention", wait(`,"since":"` + beyond + `"`), `wait_event "w" since ` + beyond + ` is further back than the event retention (48h0m0s, STEPGATE_RETENTION) before the database clock`},
		{"LongAgo", wait(`,"since":"1970-01-01T00:00:00Z"`), "further back than the event retention (48h0m0s"},
		{"InTheFuture", wait(`,"since":"2999-01-01T00:00:00Z"`), `wait_event "w" since 2999-01-01T00:00:00Z is after the database clock`},
		{"SinceAndSinceStart", wait(`,"since":"2020-01-01T00:00:00Z","since_start":true`), `wait_event "w" has since and since_start; a look-back takes one`},
		{"AnAlternativeBeyondRetention", `{"type":"wait_any","seq":1,"name":"w","of":[{"type":"receive","seq":1,"name":"w","topic":"t"},` +
			wait(`,"since":"`+beyond+`"`) + `]}`, "further back than the event retention (48h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &rawFunction{answer: func(*protocol.InvocationRequest, func(string) (int, string)) string {
				return `{"status":"suspended","await":` + tc.await + `}`
			}}
			register(t, s, c, "lookback."+tc.name, f, fastRetries)
			e := mustFail(t, c, "lookback."+tc.name)
			require.Equal(t, "bad_answer", e.Type, e.Message)
			require.Contains(t, e.Message, tc.message)
			require.EqualValues(t, 1, f.calls.Load(), "not retried")
			require.False(t, strings.Contains(e.Message, "\n"))
		})
	}
	t.Run("WithinRetention", func(t *testing.T) {
		t.Parallel()
		since := time.Now().Add(-47 * time.Hour).UTC().Format(time.RFC3339)
		f := &rawFunction{answer: func(req *protocol.InvocationRequest, _ func(string) (int, string)) string {
			if len(req.Journal) == 0 {
				return `{"status":"suspended","await":` + wait(`,"since":"`+since+`","timeout":"1s"`) + `}`
			}
			return `{"status":"completed","output":` + string(*req.Journal[0].Output) + `}`
		}}
		register(t, s, c, "lookback.within", f, nil)
		res := mustResult(t, c, startAsync(t, c, "lookback.within", `{}`))
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		require.JSONEq(t, `{"timed_out":true}`, string(*res.Output))
	})
}

// TestGoSDKSinceStart: a Go function waiting with step.SinceStart gets the event sent
// right after its run was started, before it reached its wait, each of 10 times.
func TestGoSDKSinceStart(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	type order struct {
		ID string `json:"id"`
	}
	functions.Register(app, "lookback.go", func(ctx context.Context, in order) (string, error) {
		// A step before the wait: the event comes while the run is on its way to it.
		if _, err := step.Run(ctx, "prepare", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		ev, err := step.WaitForEvent[order](ctx, "paid", "lookback.go.paid",
			step.Matching(step.Match{"data.id": in.ID}), step.SinceStart(), step.Timeout(time.Minute)).Get()
		return ev.Data.ID, err
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	var ids []string
	for i := range 10 {
		key := fmt.Sprintf("o-%d", i)
		resp := startRun(t, c, "lookback.go", fmt.Sprintf(`{"id":%q}`, key), &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		ids = append(ids, resp.JSON202.ID)
		mustSendEvent(t, c, protocol.EventSend{Name: "lookback.go.paid", Data: ptr(protocol.AnyJSON(fmt.Sprintf(`{"id":%q}`, key)))})
	}
	for i, id := range ids {
		res := awaitRunResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "run %d: %v", i, res.Error)
		require.JSONEq(t, fmt.Sprintf(`"o-%d"`, i), string(*res.Output))
	}
}
