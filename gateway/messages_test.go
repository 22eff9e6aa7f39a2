package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// received is what the inbox function answers for each receive.
type received struct {
	TimedOut  bool            `json:"timed_out,omitempty"`
	ID        string          `json:"id,omitempty"`
	Topic     string          `json:"topic,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Sender    string          `json:"sender,omitempty"`
	SenderRun string          `json:"sender_run,omitempty"`
}

// sendAnswer is what the sender function answers: the error of its send, if any.
type sendAnswer struct {
	ErrorType string `json:"error_type,omitempty"`
	Message   string `json:"message,omitempty"`
}

// receivingOn waits until run id is suspended on a receive at seq, and returns it.
func receivingOn(t *testing.T, c *protocol.ClientWithResponses, id string, seq int) protocol.RunDetail {
	t.Helper()
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		run = tryGetRun(ct, c, id)
		if assert.NotNil(ct, run.Awaiting, "run %s awaits something", id) {
			assert.Equal(ct, protocol.AwaitingKindReceive, run.Awaiting.Kind)
			assert.Equal(ct, seq, run.Awaiting.Seq)
		}
	}, 30*time.Second, 5*time.Millisecond)
	return run
}

func sendMessage(t *testing.T, c *protocol.ClientWithResponses, runID string, m protocol.MessageSend) *protocol.SendMessageResponse {
	t.Helper()
	resp, err := c.SendMessageWithResponse(t.Context(), runID, m)
	require.NoError(t, err)
	return resp
}

func mustSendMessage(t *testing.T, c *protocol.ClientWithResponses, runID string, m protocol.MessageSend) protocol.MessageReceipt {
	t.Helper()
	resp := sendMessage(t, c, runID, m)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return *resp.JSON202
}

func inboxOf(t *testing.T, c *protocol.ClientWithResponses, id string) []received {
	t.Helper()
	res := mustResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	var got []received
	require.NoError(t, json.Unmarshal(*res.Output, &got))
	for i := range got {
		if got[i].Data != nil {
			var b bytes.Buffer
			require.NoError(t, json.Compact(&b, got[i].Data))
			got[i].Data = b.Bytes()
		}
	}
	return got
}

// TestMessages sends messages to runs, from clients and from runs, through a real
// gateway.
func TestMessages(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))

	app := s.NewApp()
	// inbox receives a message of each topic of its input, in order.
	functions.Register(app, "inbox", func(ctx context.Context, in struct {
		Topics  []string `json:"topics"`
		Timeout string   `json:"timeout"`
	}) ([]received, error) {
		timeout, _ := time.ParseDuration(in.Timeout)
		out := []received{}
		for _, topic := range in.Topics {
			m, err := step.Receive[json.RawMessage](ctx, topic, step.Timeout(timeout)).Get()
			if errors.Is(err, step.ErrTimedOut) {
				out = append(out, received{TimedOut: true})
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, received{ID: m.ID, Topic: m.Topic, Data: m.Data, Sender: m.Sender.Subject, SenderRun: m.SenderRun})
		}
		return out, nil
	})
	// sender sends a message to a run and answers how the send went.
	functions.Register(app, "sender", func(ctx context.Context, in struct {
		RunID string          `json:"run_id"`
		Topic string          `json:"topic"`
		Data  json.RawMessage `json:"data"`
	}) (sendAnswer, error) {
		err := step.Send(ctx, in.RunID, in.Topic, in.Data)
		var se *step.Error
		if errors.As(err, &se) {
			return sendAnswer{ErrorType: se.Type, Message: se.Message}, nil
		}
		return sendAnswer{}, err
	})
	// racer is told, before its receive, to let a message be sent: the message is stored
	// while the run is running, before its wait is.
	arrived := make(chan chan struct{}, 1)
	functions.Register(app, "racer", func(ctx context.Context, _ struct{}) (received, error) {
		if functions.RunFrom(ctx).Attempt == 1 {
			sent := make(chan struct{})
			arrived <- sent
			<-sent
		}
		m, err := step.Receive[string](ctx, "race", step.Timeout(time.Hour)).Get()
		return received{ID: m.ID}, err
	})
	appURL := s.ServeApp(t, app)
	for _, cl := range []*protocol.ClientWithResponses{c, other} {
		synced, err := cl.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}

	t.Run("AMessageSentBeforeTheReceiveIsTakenAtOnce", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["a","b"],"timeout":"1h"}`)
		run := receivingOn(t, c, id, 1)
		require.Equal(t, "a", *run.Awaiting.Topic)
		require.NotNil(t, run.WakeAt, "the timeout is the run's wake time")

		b := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "b", ID: ptr("m-b"), Data: ptr(protocol.AnyJSON(`{"n":2}`))})
		require.False(t, b.Consumed, "the run waits on another topic: b waits in the mailbox")
		a := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "a", ID: ptr("m-a"), Data: ptr(protocol.AnyJSON(`{"n":1}`))})
		require.True(t, a.Consumed, "the run waited on a: it took the message in the send's transaction")
		require.Equal(t, id, a.RunID)

		got := inboxOf(t, c, id)
		require.Len(t, got, 2)
		require.Equal(t, received{ID: "m-a", Topic: "a", Data: json.RawMessage(`{"n":1}`), Sender: "alice"}, got[0])
		require.Equal(t, received{ID: "m-b", Topic: "b", Data: json.RawMessage(`{"n":2}`), Sender: "alice"}, got[1])

		// The journal holds each message with its sender.
		j := getRun(t, c, id).Journal
		require.Len(t, j, 2)
		require.Equal(t, protocol.EntryKindReceive, j[1].Kind)
		require.Equal(t, "b", j[1].Name)
		var out struct {
			Message struct {
				ID       string            `json:"id"`
				Topic    string            `json:"topic"`
				Identity protocol.Identity `json:"identity"`
				SentAt   time.Time         `json:"sent_at"`
			} `json:"message"`
		}
		require.NoError(t, json.Unmarshal(*j[1].Output, &out))
		require.Equal(t, "m-b", out.Message.ID)
		require.Equal(t, protocol.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}, out.Message.Identity)
		require.True(t, b.SentAt.Equal(out.Message.SentAt), "%s, %s", b.SentAt, out.Message.SentAt)
	})

	t.Run("EachMessageIsTakenOnceInOrder", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["q","q","q"],"timeout":"1s"}`)
		receivingOn(t, c, id, 1)
		first := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "q", ID: ptr("q-1"), Data: ptr(protocol.AnyJSON(`1`))})
		second := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "q", ID: ptr("q-2"), Data: ptr(protocol.AnyJSON(`2`))})
		require.True(t, first.Consumed)
		// The second is taken by the second receive (at once when it stores no wait).
		got := inboxOf(t, c, id)
		require.Len(t, got, 3)
		require.Equal(t, "q-1", got[0].ID)
		require.Equal(t, "q-2", got[1].ID)
		require.True(t, got[2].TimedOut, "no third message: the third receive times out")
		// Both are consumed now; a duplicate of the second says so.
		dup := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "q", ID: ptr("q-2")})
		require.True(t, *dup.Duplicate)
		require.True(t, dup.Consumed)
		require.True(t, second.SentAt.Equal(dup.SentAt))
		require.JSONEq(t, `{"timed_out":true}`, string(*getRun(t, c, id).Journal[2].Output))
	})

	t.Run("AMessageSentWhileTheRunRunsIsNotLost", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "racer", `{}`)
		sent := <-arrived // the invocation runs, and has not stored its receive
		require.False(t, mustSendMessage(t, c, id, protocol.MessageSend{Topic: "race", ID: ptr("r-1")}).Consumed)
		close(sent)
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		require.JSONEq(t, `{"id":"r-1"}`, string(*res.Output))
	})

	t.Run("ConcurrentSendsAreEachTakenOnce", func(t *testing.T) {
		t.Parallel()
		const n = 6
		id := startAsync(t, c, "inbox", `{"topics":["c","c","c","c","c","c"],"timeout":"1h"}`)
		receivingOn(t, c, id, 1)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp, err := c.SendMessageWithResponse(context.Background(), id, protocol.MessageSend{Topic: "c", ID: ptr(strings.Repeat("x", i+1))})
				if assert.NoError(t, err) {
					assert.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
				}
			})
		}
		wg.Wait()
		seen := map[string]bool{}
		for _, r := range inboxOf(t, c, id) {
			require.False(t, r.TimedOut)
			require.False(t, seen[r.ID], "%s taken twice", r.ID)
			seen[r.ID] = true
		}
		require.Len(t, seen, n)
	})

	t.Run("AnIDDeduplicates", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["d","d"],"timeout":"1s"}`)
		receivingOn(t, c, id, 1)
		first := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "d", ID: ptr("same"), Data: ptr(protocol.AnyJSON(`"first"`))})
		require.Nil(t, first.Duplicate)
		again := mustSendMessage(t, c, id, protocol.MessageSend{Topic: "d", ID: ptr("same"), Data: ptr(protocol.AnyJSON(`"second"`))})
		require.True(t, *again.Duplicate)
		require.True(t, first.SentAt.Equal(again.SentAt), "the duplicate answers the first message")
		got := inboxOf(t, c, id)
		require.Equal(t, json.RawMessage(`"first"`), got[0].Data)
		require.True(t, got[1].TimedOut, "the duplicate was not stored")
	})

	t.Run("TheTimeoutEndsTheReceive", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["never"],"timeout":"1s"}`)
		require.Equal(t, []received{{TimedOut: true}}, inboxOf(t, c, id))
		e := getRun(t, c, id).Journal[0]
		require.Equal(t, protocol.EntryKindReceive, e.Kind)
		require.JSONEq(t, `{"timed_out":true}`, string(*e.Output))
		// The run has finished: a later message is a 409 naming its status.
		resp := sendMessage(t, c, id, protocol.MessageSend{Topic: "never"})
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "is already completed")
	})

	t.Run("ARunSendsWithItsIdentity", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["hello"],"timeout":"1h"}`)
		receivingOn(t, c, id, 1)
		res := mustComplete(t, c, "sender", `{"run_id":"`+id+`","topic":"hello","data":{"hi":true}}`)
		require.JSONEq(t, `{}`, string(*res.Output))
		got := inboxOf(t, c, id)
		require.Equal(t, []received{{ID: res.ID + ":1", Topic: "hello", Data: json.RawMessage(`{"hi":true}`), Sender: "alice", SenderRun: res.ID}}, got)
		// The sender's journal holds the message.
		e := getRun(t, c, res.ID).Journal[0]
		require.Equal(t, protocol.EntryKindSend, e.Kind)
		require.JSONEq(t, `{"run_id":"`+id+`","topic":"hello","data":{"hi":true},"id":"`+res.ID+`:1"}`, string(*e.Output))

		// To a finished run, the send is journaled as refused, and the function goes on.
		late := mustComplete(t, c, "sender", `{"run_id":"`+id+`","topic":"hello"}`)
		var answer sendAnswer
		require.NoError(t, json.Unmarshal(*late.Output, &answer))
		require.Equal(t, step.ErrorTypeFinished, answer.ErrorType)
		require.Contains(t, answer.Message, "is already completed")
		e = getRun(t, c, late.ID).Journal[0]
		require.Nil(t, e.Output)
		require.Equal(t, step.ErrorTypeFinished, e.Error.Type)
	})

	t.Run("ARunCannotSendToAnotherTenantsRun", func(t *testing.T) {
		t.Parallel()
		theirs := startAsync(t, other, "inbox", `{"topics":["x"],"timeout":"1h"}`)
		receivingOn(t, other, theirs, 1)
		res := mustComplete(t, c, "sender", `{"run_id":"`+theirs+`","topic":"x","data":"boo"}`)
		var answer sendAnswer
		require.NoError(t, json.Unmarshal(*res.Output, &answer))
		require.Equal(t, step.ErrorTypeNotFound, answer.ErrorType)
		var stored int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.message WHERE run_id = $1`, theirs).Scan(&stored))
		require.Zero(t, stored)
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, other, theirs).Status)
		// Through the API too: another tenant's run is a 404.
		resp := sendMessage(t, c, theirs, protocol.MessageSend{Topic: "x"})
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		cancel, err := other.CancelRunWithResponse(t.Context(), theirs)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["z"],"timeout":"1h"}`)
		receivingOn(t, c, id, 1)

		resp := sendMessage(t, c, "0193a3c2-0000-7000-8000-00000000dead", protocol.MessageSend{Topic: "z"})
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		resp = sendMessage(t, c, "not-a-run", protocol.MessageSend{Topic: "z"})
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		resp = sendMessage(t, viewer, id, protocol.MessageSend{Topic: "z"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON403.Detail, "events:send")
		resp = sendMessage(t, c, id, protocol.MessageSend{Topic: ""})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "message topic")
		resp = sendMessage(t, c, id, protocol.MessageSend{Topic: strings.Repeat("t", 256)})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "255 bytes")
		resp = sendMessage(t, c, id, protocol.MessageSend{Topic: "z", Data: ptr(protocol.AnyJSON(`"\u0000"`))})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))

		raw, err := c.SendMessageWithBodyWithResponse(t.Context(), id, "application/json", strings.NewReader(`{"topic":`))
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, raw.StatusCode(), string(raw.Body))
		big := `{"topic":"z","data":"` + strings.Repeat("x", 2<<20) + `"}`
		raw, err = c.SendMessageWithBodyWithResponse(t.Context(), id, "application/json", bytes.NewReader([]byte(big)))
		require.NoError(t, err)
		require.Equal(t, http.StatusRequestEntityTooLarge, raw.StatusCode(), string(raw.Body))

		// None of them reached the run, which still waits; a cancelled run takes no more.
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, c, id).Status)
		cancel, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
		resp = sendMessage(t, c, id, protocol.MessageSend{Topic: "z"})
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "is already cancelled")
	})

	t.Run("TheMailboxIsBounded", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "inbox", `{"topics":["wanted"],"timeout":"1h"}`)
		receivingOn(t, c, id, 1)
		// Fill the mailbox with messages the run does not wait for.
		var wg sync.WaitGroup
		errs := make(chan string, journal.MaxUnconsumedMessages)
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < journal.MaxUnconsumedMessages; i += 4 {
					resp, err := c.SendMessageWithResponse(context.Background(), id, protocol.MessageSend{Topic: "other"})
					if err != nil {
						errs <- err.Error()
					} else if resp.StatusCode() != http.StatusAccepted {
						errs <- string(resp.Body)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			require.Fail(t, e)
		}
		resp := sendMessage(t, c, id, protocol.MessageSend{Topic: "other"})
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON429.Detail, "1000 messages")
		// A message the run waits for is taken, full mailbox or not.
		require.True(t, mustSendMessage(t, c, id, protocol.MessageSend{Topic: "wanted"}).Consumed)
		require.Equal(t, protocol.RunStatusCompleted, mustResult(t, c, id).Status)
	})
}
