package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
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

// TestRequestSDK runs Go functions that take requests with step.ReceiveRequest and
// answer them with step.Reply and step.ReplyError, through a real gateway.
func TestRequestSDK(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))

	type reply struct {
		Total  int    `json:"total"`
		Call   int    `json:"call"`
		Sender string `json:"sender"`
	}
	app := s.NewApp()
	// counter adds what each of n requests "add" says to its total, and replies the
	// total; a negative number is an error reply. Its invocation is lost right after
	// its first reply: the replay must not reply again (each reply names how many times
	// the code reached a reply, so a second reply would contradict the journal).
	var calls atomic.Int32
	functions.Register(app, "counter", func(ctx context.Context, in struct{ N int }) (int, error) {
		total := 0
		for i := range in.N {
			r, err := step.ReceiveRequest[struct{ Add int }](ctx, "add", step.Timeout(time.Hour)).Get()
			if err != nil {
				return 0, err
			}
			if r.Data.Add < 0 {
				if err := step.ReplyError(ctx, r.ID, &step.Error{Type: "negative", Message: "cannot add a negative number"}); err != nil {
					return 0, err
				}
				continue
			}
			total += r.Data.Add
			call := int(calls.Add(1))
			if err := step.Reply(ctx, r.ID, reply{Total: total, Call: call, Sender: r.Sender.Subject}); err != nil {
				return 0, err
			}
			if i == 0 && call == 1 {
				return 0, errors.New("lost after the first reply")
			}
		}
		return total, nil
	}, functions.InvocationBackoff(10*time.Millisecond, 10*time.Millisecond))
	// picker takes a request "ask" or gives up when an hour passes, whichever comes
	// first.
	functions.Register(app, "picker", func(ctx context.Context, _ struct{}) (string, error) {
		ask := step.ReceiveRequest[string](ctx, "ask")
		i, err := step.WaitFirst(ctx, "first", ask, step.After(ctx, "late", time.Hour))
		if err != nil || i != 0 {
			return "late", err
		}
		r, err := ask.Get()
		if err != nil {
			return "", err
		}
		return "replied", step.Reply(ctx, r.ID, "you asked "+r.Data)
	})
	// stranger replies to a request it never received.
	functions.Register(app, "stranger", func(ctx context.Context, _ struct{}) (string, error) {
		return "replied", step.Reply(ctx, "someone-elses", "hi")
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("RepliesAndAnErrorReplyOncePerRequest", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "counter", `{"n":3}`)
		receivingOn(t, c, id, 1)

		resp := sendRequest(t, c, id, "30s", protocol.RequestSend{Name: "add", Data: ptr(protocol.AnyJSON(`{"add":2}`))})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.RunRequestStatus("replied"), resp.JSON200.Status)
		require.JSONEq(t, `{"total":2,"call":1,"sender":"alice"}`, string(*resp.JSON200.Reply))

		// The invocation lost after the reply is retried, replays it, and waits again.
		receivingOn(t, c, id, 3)
		resp = sendRequest(t, c, id, "30s", protocol.RequestSend{Name: "add", Data: ptr(protocol.AnyJSON(`{"add":-1}`))})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Nil(t, resp.JSON200.Reply)
		require.Equal(t, &protocol.ErrorInfo{Type: "negative", Message: "cannot add a negative number"},
			&protocol.ErrorInfo{Type: resp.JSON200.Error.Type, Message: resp.JSON200.Error.Message})
		require.Equal(t, ptr(4), resp.JSON200.ReplySeq)

		resp = sendRequest(t, c, id, "30s", protocol.RequestSend{Name: "add", Data: ptr(protocol.AnyJSON(`{"add":5}`)), ID: ptr("last")})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		var last reply
		require.NoError(t, json.Unmarshal(*resp.JSON200.Reply, &last))
		require.Equal(t, 7, last.Total)

		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		require.JSONEq(t, `7`, string(*res.Output))
		j := getRun(t, c, id).Journal
		require.Len(t, j, 6, "three receives, each followed by one reply")
		for i, e := range j {
			want := protocol.EntryKindReceive
			if i%2 == 1 {
				want = protocol.EntryKindReply
			}
			require.Equal(t, want, e.Kind, "entry %d", i+1)
		}
		require.Equal(t, "request:add", j[0].Name)
		require.Equal(t, "last", j[5].Name, "a reply is named after its request's id")
		require.JSONEq(t, `{"total":2,"call":1,"sender":"alice"}`, string(*j[1].Output), "the first invocation's reply, journaled once")
	})

	t.Run("WaitFirstTakesARequest", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "picker", `{}`)
		waitingOn(t, c, id, protocol.AwaitingKindWaitAny)
		resp := sendRequest(t, c, id, "30s", protocol.RequestSend{Name: "ask", Data: ptr(protocol.AnyJSON(`"why"`))})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.JSONEq(t, `"you asked why"`, string(*resp.JSON200.Reply))
		require.Equal(t, ptr(1), resp.JSON200.ReceivedSeq, "the wait_any's seq")
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		require.JSONEq(t, `"replied"`, string(*res.Output))
	})

	t.Run("AReplyToARequestNotReceivedFailsTheRun", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "stranger", `{}`)
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusFailed, res.Status)
		require.Contains(t, res.Error.Message, `has no request with id "someone-elses"`)
		require.Empty(t, getRun(t, c, id).Journal)
	})
}
