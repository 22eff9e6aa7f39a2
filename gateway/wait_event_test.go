package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// paid is the data of an orders.paid event.
type paid struct {
	OrderID string  `json:"order_id"`
	Amount  float64 `json:"amount"`
}

// waitOutcome is what a waiting function answers: the event it got, or that it timed
// out.
type waitOutcome struct {
	TimedOut bool               `json:"timed_out"`
	ID       string             `json:"id"`
	Data     paid               `json:"data"`
	Sender   functions.Identity `json:"sender"`
}

// timedOut says whether err is a wait's time-out, and returns err unless it is.
func timedOut(err error) (bool, error) {
	if errors.Is(err, step.ErrTimedOut) {
		return true, nil
	}
	return false, err
}

func outcomeOf(ev step.Event[paid], err error) (waitOutcome, error) {
	if errors.Is(err, step.ErrTimedOut) {
		return waitOutcome{TimedOut: true}, nil
	}
	return waitOutcome{ID: ev.ID, Data: ev.Data, Sender: ev.Sender}, err
}

// waitingFor waits until run id is suspended on a wait_event, and returns it.
func waitingFor(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	return waitingOn(t, c, id, protocol.AwaitingKindWaitEvent)
}

// waitingOn waits until run id is suspended on an await of kind, and returns it.
func waitingOn(t *testing.T, c *protocol.ClientWithResponses, id string, kind protocol.AwaitingKind) protocol.RunDetail {
	t.Helper()
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		run = tryGetRun(ct, c, id)
		if assert.NotNil(ct, run.Awaiting, "run %s awaits something", id) {
			assert.Equal(ct, kind, run.Awaiting.Kind)
		}
	}, 30*time.Second, 5*time.Millisecond)
	return run
}

// tryGetRun reads run id, for a condition of EventuallyWithT.
func tryGetRun(ct *assert.CollectT, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	resp, err := c.GetRunWithResponse(context.Background(), id, nil)
	if assert.NoError(ct, err) && assert.Equal(ct, http.StatusOK, resp.StatusCode(), string(resp.Body)) {
		return *resp.JSON200
	}
	return protocol.RunDetail{}
}

// TestWaitForEvent runs functions that wait for events through a real gateway.
func TestWaitForEvent(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	app := s.NewApp()
	// wait waits for orders.paid of the order in its input, for the timeout in it.
	functions.Register(app, "wait", func(ctx context.Context, in struct {
		OrderID string `json:"order_id"`
		Timeout string `json:"timeout"`
	}) (waitOutcome, error) {
		opts := []step.Option{step.Matching(step.Match{"data.order_id": in.OrderID})}
		if timeout, _ := time.ParseDuration(in.Timeout); timeout > 0 {
			opts = append(opts, step.Timeout(timeout))
		}
		return outcomeOf(step.WaitForEvent[paid](ctx, "paid", "orders.paid", opts...).Get())
	})
	// twice waits for any two orders.tick events, one after the other.
	functions.Register(app, "twice", func(ctx context.Context, _ struct{}) ([]string, error) {
		var ids []string
		for i := range 2 {
			w, err := step.WaitForEvent[any](ctx, fmt.Sprintf("tick-%d", i), "orders.tick", step.Timeout(time.Hour)).Get()
			if err != nil {
				return nil, err
			}
			ids = append(ids, w.ID)
		}
		return ids, nil
	})
	// amount waits for orders.paid with an amount of 100.
	functions.Register(app, "amount", func(ctx context.Context, _ struct{}) (waitOutcome, error) {
		return outcomeOf(step.WaitForEvent[paid](ctx, "paid", "orders.paid", step.Matching(step.Match{"data.amount": 100}), step.Timeout(time.Hour)).Get())
	})
	// payer sends orders.paid from a run.
	functions.Register(app, "payer", func(ctx context.Context, p paid) (struct{}, error) {
		return struct{}{}, step.SendEvent(ctx, "orders.paid", p)
	})
	// racer is told, between its invocation's start and its wait, to let an event be
	// sent: the event is stored before the wait is.
	arrived := make(chan chan struct{}, 1)
	functions.Register(app, "racer", func(ctx context.Context, in struct {
		OrderID string `json:"order_id"`
	}) (waitOutcome, error) {
		if functions.RunFrom(ctx).Attempt == 1 {
			sent := make(chan struct{})
			arrived <- sent
			<-sent
		}
		return outcomeOf(step.WaitForEvent[paid](ctx, "paid", "orders.paid", step.Matching(step.Match{"data.order_id": in.OrderID}), step.Timeout(time.Hour)).Get())
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("TheMatchingEventResumesTheRun", func(t *testing.T) {
		t.Parallel()
		mine := startAsync(t, c, "wait", `{"order_id":"o-17","timeout":"1h"}`)
		others := startAsync(t, c, "wait", `{"order_id":"o-18","timeout":"1h"}`)
		run := waitingFor(t, c, mine)
		require.Equal(t, "orders.paid", *run.Awaiting.Event)
		require.JSONEq(t, `{"data.order_id":"o-17"}`, string(mustJSON(t, run.Awaiting.Match)))
		require.NotNil(t, run.WakeAt, "the timeout is the run's wake time")
		waitingFor(t, c, others)

		receipt := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", ID: ptr("pay-o-17"),
			Data: ptr(protocol.AnyJSON(`{"order_id":"o-17","amount":5}`))})
		require.Equal(t, []string{mine}, *receipt.Resumed)

		res := mustResult(t, c, mine)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		var got waitOutcome
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		require.Equal(t, waitOutcome{ID: "pay-o-17", Data: paid{"o-17", 5}, Sender: functions.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}}, got)

		// The journal holds the event, with its sender.
		entry := getRun(t, c, mine).Journal[0]
		require.Equal(t, protocol.EntryKindWaitEvent, entry.Kind)
		var out struct {
			Event struct {
				ID       string            `json:"id"`
				Identity protocol.Identity `json:"identity"`
			} `json:"event"`
		}
		require.NoError(t, json.Unmarshal(*entry.Output, &out))
		require.Equal(t, "pay-o-17", out.Event.ID)
		require.Equal(t, "alice", out.Event.Identity.Subject)

		// The other run still waits: the event did not match it.
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, c, others).Status)
		require.Equal(t, []string{others}, *mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid",
			Data: ptr(protocol.AnyJSON(`{"order_id":"o-18","amount":6}`))}).Resumed)
		require.Equal(t, protocol.RunStatusCompleted, mustResult(t, c, others).Status)
	})

	t.Run("TheTimeoutEndsTheWait", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wait", `{"order_id":"never","timeout":"1s"}`)
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		require.JSONEq(t, `{"timed_out":true,"id":"","data":{"order_id":"","amount":0},"sender":{"subject":"","tenant":"","roles":null}}`, string(*res.Output))
		entry := getRun(t, c, id).Journal[0]
		require.JSONEq(t, `{"timed_out":true}`, string(*entry.Output))
		// A later event finds no wait.
		receipt := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(`{"order_id":"never"}`))})
		require.Nil(t, receipt.Resumed)
	})

	t.Run("EachWaitIsResumedOnceByTheFirstEvent", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wait", `{"order_id":"o-once","timeout":"1h"}`)
		waitingFor(t, c, id)
		first := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", ID: ptr("once-1"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-once","amount":1}`))})
		second := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", ID: ptr("once-2"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-once","amount":2}`))})
		require.Equal(t, []string{id}, *first.Resumed)
		require.Nil(t, second.Resumed)
		var got waitOutcome
		require.NoError(t, json.Unmarshal(*mustResult(t, c, id).Output, &got))
		require.Equal(t, "once-1", got.ID)
		// A duplicate of the first resumes nothing either.
		dup := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", ID: ptr("once-1"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-once"}`))})
		require.True(t, *dup.Duplicate)
		require.Nil(t, dup.Resumed)
	})

	t.Run("AnEventStoredBeforeTheWaitIsNotLost", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "racer", `{"order_id":"o-race"}`)
		sent := <-arrived // the invocation runs, and has not stored its wait
		receipt := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", ID: ptr("race-1"), Data: ptr(protocol.AnyJSON(`{"order_id":"o-race","amount":3}`))})
		require.Nil(t, receipt.Resumed, "the run does not wait yet")
		close(sent)
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status)
		var got waitOutcome
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		require.Equal(t, "race-1", got.ID, "the event stored since the invocation started matched")
	})

	t.Run("AReceivedEventIsNotReceivedAgain", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "twice", `{}`)
		waitingFor(t, c, id)
		require.Equal(t, []string{id}, *mustSendEvent(t, c, protocol.EventSend{Name: "orders.tick", ID: ptr("tick-a")}).Resumed)
		// The second wait starts within the first event's window, and must not take it.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			run := tryGetRun(ct, c, id)
			if assert.NotNil(ct, run.Awaiting) {
				assert.Equal(ct, 2, run.Awaiting.Seq)
			}
		}, 30*time.Second, 5*time.Millisecond)
		require.Equal(t, []string{id}, *mustSendEvent(t, c, protocol.EventSend{Name: "orders.tick", ID: ptr("tick-b")}).Resumed)
		require.JSONEq(t, `["tick-a","tick-b"]`, string(*mustResult(t, c, id).Output))
	})

	t.Run("NumbersMatchByValue", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "amount", `{}`)
		waitingFor(t, c, id)
		require.Nil(t, mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(`{"amount":"100"}`))}).Resumed, "a string is not a number")
		require.Nil(t, mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(`{"amount":{"v":100}}`))}).Resumed, "an object matches nothing")
		require.Equal(t, []string{id}, *mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(`{"amount":100.0}`))}).Resumed)
		require.Equal(t, protocol.RunStatusCompleted, mustResult(t, c, id).Status)
	})

	t.Run("AnEventFromARunResumesWaiters", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wait", `{"order_id":"o-run","timeout":"1h"}`)
		waitingFor(t, c, id)
		payer := mustComplete(t, c, "payer", `{"order_id":"o-run","amount":9}`)
		var got waitOutcome
		require.NoError(t, json.Unmarshal(*mustResult(t, c, id).Output, &got))
		require.Equal(t, payer.ID+":1", got.ID)
		require.Equal(t, "alice", got.Sender.Subject, "the run's identity sent it")
	})

	t.Run("AnotherTenantsEventResumesNothing", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wait", `{"order_id":"o-t2","timeout":"1h"}`)
		waitingFor(t, c, id)
		receipt := mustSendEvent(t, other, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(`{"order_id":"o-t2"}`))})
		require.Nil(t, receipt.Resumed)
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, c, id).Status)
		cancel, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
	})

	t.Run("ACancelledRunIsNotResumed", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "wait", `{"order_id":"o-cancel","timeout":"1h"}`)
		waitingFor(t, c, id)
		cancel, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
		receipt := mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(`{"order_id":"o-cancel"}`))})
		require.Nil(t, receipt.Resumed)
		run := getRun(t, c, id)
		require.Equal(t, protocol.RunStatusCancelled, run.Status)
		require.Empty(t, run.Journal)
	})
}
