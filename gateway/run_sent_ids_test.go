package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRunSentIDsCannotBeClaimed: the ids a run's events and messages get,
// "<run id>:<seq>", are the run's: a caller who sends one first with that id is refused,
// so the run's own event is stored with its data and starts its triggers, and its own
// message reaches the target; a function cannot send another run's id either.
func TestRunSentIDsCannotBeClaimed(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)

	app := s.NewApp()
	// sender waits to be told the target, then sends an event (seq 2) and a message to
	// the target (seq 3).
	functions.Register(app, "sender", func(ctx context.Context, _ struct{}) (struct{}, error) {
		r, err := step.Receive[string](ctx, "target", step.Timeout(time.Hour)).Get()
		if err != nil {
			return struct{}{}, err
		}
		if err := step.SendEvent(ctx, "claimed.ping", map[string]string{"from": "the run"}); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, step.Send(ctx, r.Data, "note", "the run's note")
	})
	// target receives one note.
	functions.Register(app, "target", func(ctx context.Context, _ struct{}) (received, error) {
		r, err := step.Receive[json.RawMessage](ctx, "note", step.Timeout(time.Hour)).Get()
		return received{ID: r.ID, Data: r.Data, SenderRun: r.SenderRun}, err
	})
	// pinged is started by claimed.ping, and answers its input.
	functions.Register(app, "pinged", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil },
		functions.OnEvent("claimed.ping"))
	s.Sync(t, s.ServeApp(t, app))

	sender := startAsync(t, c, "sender", `{}`)
	target := startAsync(t, c, "target", `{}`)
	receivingOn(t, c, sender, 1)
	receivingOn(t, c, target, 1)

	// The caller tries to claim the ids the run's event and message will have.
	for _, id := range []string{sender + ":2", strings.ToUpper(sender) + ":2"} {
		resp := sendEvent(t, c, protocol.EventSend{Name: "claimed.ping", ID: ptr(id), Data: ptr(protocol.AnyJSON(`{"from":"a caller"}`))})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "reserved for the events and messages runs send")
	}
	msg := sendMessage(t, c, target, protocol.MessageSend{Topic: "note", ID: ptr(sender + ":3"), Data: ptr(protocol.AnyJSON(`"a caller's note"`))})
	require.Equal(t, http.StatusBadRequest, msg.StatusCode(), string(msg.Body))
	require.Contains(t, string(msg.Body), "reserved for the events and messages runs send")
	require.Equal(t, protocol.RunStatusSuspended, getRun(t, c, target).Status, "the refused message resumed nothing")
	// Ids that only look alike are the caller's to choose.
	for _, id := range []string{sender + ":", sender + ":2x", "x" + sender + ":2", "order:17"} {
		require.Nil(t, mustSendEvent(t, c, protocol.EventSend{Name: "claimed.other", ID: ptr(id)}).Duplicate, id)
	}

	mustSendMessage(t, c, sender, protocol.MessageSend{Topic: "target", Data: ptr(protocol.AnyJSON(`"` + target + `"`))})
	require.Equal(t, protocol.RunStatusCompleted, mustResult(t, c, sender).Status)

	// The run's event is stored with its own data, and its trigger ran.
	evs, err := c.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: ptr("claimed.ping")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, evs.StatusCode(), string(evs.Body))
	require.Len(t, evs.JSON200.Events, 1)
	ev := evs.JSON200.Events[0]
	require.Equal(t, sender+":2", ev.ID)
	require.JSONEq(t, `{"from":"the run"}`, string(ev.Data))
	require.Equal(t, sender, *ev.SourceRunID)
	require.Len(t, ev.Runs, 1)
	pinged := mustResult(t, c, ev.Runs[0])
	require.Equal(t, protocol.RunStatusCompleted, pinged.Status)
	require.JSONEq(t, `{"from":"the run"}`, string(*pinged.Output))

	// The run's message reached the target.
	res := mustResult(t, c, target)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	var got received
	require.NoError(t, json.Unmarshal(*res.Output, &got))
	require.Equal(t, sender+":3", got.ID)
	require.JSONEq(t, `"the run's note"`, string(got.Data))
	require.Equal(t, sender, got.SenderRun)
}

// TestARunCannotSendAnotherRunsID: a function that names, in its own event or send
// entry, an id of the form <run id>:<seq> other than the entry's own is refused 400.
func TestARunCannotSendAnotherRunsID(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	victim := "0190a2b4-0000-7000-8000-000000000001"
	type result struct {
		event, send, own int
		detail           string
	}
	results := make(chan result, 1)
	fn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req protocol.InvocationRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var detail string
		checkpoint := func(body string) int {
			hreq, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), "POST", req.Checkpoint.URL, strings.NewReader(body))
			hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
			resp, err := http.DefaultClient.Do(hreq)
			if err != nil {
				return 0
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if detail == "" && resp.StatusCode != http.StatusOK {
				detail = string(b)
			}
			return resp.StatusCode
		}
		var res result
		res.event = checkpoint(`{"seq":1,"kind":"event","name":"raw.ping","output":{"name":"raw.ping","id":"` + victim + `:1"}}`)
		res.send = checkpoint(`{"seq":1,"kind":"send","name":"note","output":{"run_id":"` + victim + `","topic":"note","id":"` + victim + `:1"}}`)
		res.own = checkpoint(`{"seq":1,"kind":"event","name":"raw.ping","output":{"name":"raw.ping","id":"` + req.Run.ID + `:1"}}`)
		res.detail = detail
		select {
		case results <- res:
		default: // a retried invocation; the first one's results count
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"completed","output":"ok"}`))
	})
	reg, err := c.RegisterFunctionWithResponse(t.Context(), "raw", protocol.FunctionRegistration{URL: s.ServeApp(t, fn)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	resp := startRun(t, c, "raw", `{}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))

	res := <-results
	require.Equal(t, http.StatusBadRequest, res.event, res.detail)
	require.Equal(t, http.StatusBadRequest, res.send, res.detail)
	require.Contains(t, res.detail, "is reserved: a run's event or message may have that form only as its own")
	require.Equal(t, http.StatusOK, res.own, "its own id is the run's to send")
	ev, err := c.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: ptr("raw.ping")})
	require.NoError(t, err)
	require.Len(t, ev.JSON200.Events, 1)
	require.Equal(t, resp.JSON200.ID+":1", ev.JSON200.Events[0].ID)
}
