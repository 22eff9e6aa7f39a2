package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
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

// resumedBy is what the guarded functions answer: the event or message that resumed
// them, and who sent it.
type resumedBy struct {
	Kind   string `json:"kind"` // "event" or "message"
	ID     string `json:"id"`
	Sender string `json:"sender"`
}

// awaitingOrDone waits until run id is suspended on an await, or has finished, and
// returns it: a run that took what it waits for at once does not wait.
func awaitingOrDone(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		run = tryGetRun(ct, c, id)
		assert.True(ct, run.Awaiting != nil || run.Status == protocol.RunStatusCompleted || run.Status == protocol.RunStatusFailed,
			"run %s is %s", id, run.Status)
	}, 30*time.Second, 5*time.Millisecond)
	return run
}

// TestResumeRespectsInvokeRoles: a function whose invoke_roles restrict who starts it
// also restricts who resumes its runs' waits. In one tenant, boss has the function's
// role and clerk has not (both may send events); hook has the role the function names
// in resume_roles; mallory is another tenant's admin.
func TestResumeRespectsInvokeRoles(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	boss := s.Client(t, s.NewToken(t, auth.Identity{Subject: "boss", Tenant: "t1", Roles: []string{"invoker", "payments"}}))
	clerk := s.Client(t, s.NewToken(t, auth.Identity{Subject: "clerk", Tenant: "t1", Roles: []string{"invoker"}}))
	hook := s.Client(t, s.NewToken(t, auth.Identity{Subject: "hook", Tenant: "t1", Roles: []string{"invoker", "webhooks"}}))
	admin := s.Client(t, s.NewToken(t, auth.Identity{Subject: "root", Tenant: "t1", Roles: []string{"admin"}}))
	mallory := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	type keyed struct {
		Key string `json:"key"`
	}
	app := s.NewApp()
	payments := functions.InvokeRoles("payments")
	// guarded waits for pay.ok of its key.
	functions.Register(app, "guarded", func(ctx context.Context, in keyed) (resumedBy, error) {
		w, err := step.WaitForEvent[keyed](ctx, "ok", "pay.ok", step.Matching(step.Match{"data.key": in.Key}), step.Timeout(time.Hour)).Get()
		return resumedBy{"event", w.ID, w.Sender.Subject}, err
	}, payments)
	// hooked is guarded too, and lets the webhooks role resume it.
	functions.Register(app, "hooked", func(ctx context.Context, in keyed) (resumedBy, error) {
		w, err := step.WaitForEvent[keyed](ctx, "ok", "pay.ok", step.Matching(step.Match{"data.key": in.Key}), step.Timeout(time.Hour)).Get()
		return resumedBy{"event", w.ID, w.Sender.Subject}, err
	}, payments, functions.ResumeRoles("webhooks"))
	// inbox receives one message of topic go.
	functions.Register(app, "inbox", func(ctx context.Context, _ struct{}) (resumedBy, error) {
		r, err := step.Receive[any](ctx, "go", step.Timeout(time.Hour)).Get()
		return resumedBy{"message", r.ID, r.Sender.Subject}, err
	}, payments)
	// either waits for pay.ok of its key or a message of topic go, whichever is first.
	functions.Register(app, "either", func(ctx context.Context, in keyed) (resumedBy, error) {
		ok := step.WaitForEvent[keyed](ctx, "ok", "pay.ok", step.Matching(step.Match{"data.key": in.Key}))
		goMsg := step.Receive[any](ctx, "go")
		i, err := step.WaitFirst(ctx, "first", ok, goMsg, step.After(ctx, "hour", time.Hour))
		if err != nil {
			return resumedBy{}, err
		}
		if i == 0 {
			ev, err := ok.Get()
			return resumedBy{"event", ev.ID, ev.Sender.Subject}, err
		}
		m, err := goMsg.Get()
		return resumedBy{"message", m.ID, m.Sender.Subject}, err
	}, payments)
	// gate is guarded; it waits for pay.ok of its key once told to, after an event has
	// been stored since its invocation began.
	gates := make(chan chan struct{}, 1)
	functions.Register(app, "gate", func(ctx context.Context, in keyed) (resumedBy, error) {
		if functions.RunFrom(ctx).Attempt == 1 {
			open := make(chan struct{})
			gates <- open
			<-open
		}
		w, err := step.WaitForEvent[keyed](ctx, "ok", "pay.ok", step.Matching(step.Match{"data.key": in.Key}), step.Timeout(time.Hour)).Get()
		return resumedBy{"event", w.ID, w.Sender.Subject}, err
	}, payments)
	// triggered is guarded, and started by pay.start.
	functions.Register(app, "triggered", func(ctx context.Context, in keyed) (keyed, error) { return in, nil },
		payments, functions.OnEvent("pay.start"))
	// relay, open to all, sends pay.ok of a key from a run, and a message of topic go to
	// a run, with its caller's identity: the answer is the send's error type, if any.
	functions.Register(app, "relay", func(ctx context.Context, in struct {
		Key string `json:"key"`
		To  string `json:"to"`
	}) (sendAnswer, error) {
		if in.Key != "" {
			if err := step.SendEvent(ctx, "pay.ok", keyed{in.Key}); err != nil {
				return sendAnswer{}, err
			}
		}
		if in.To == "" {
			return sendAnswer{}, nil
		}
		var se *step.Error
		if err := step.Send(ctx, in.To, "go", "from a run"); errors.As(err, &se) {
			return sendAnswer{ErrorType: se.Type, Message: se.Message}, nil
		} else if err != nil {
			return sendAnswer{}, err
		}
		return sendAnswer{}, nil
	})
	synced, err := admin.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	payOK := func(key, id string) protocol.EventSend {
		return protocol.EventSend{Name: "pay.ok", ID: &id, Data: ptr(protocol.AnyJSON(`{"key":"` + key + `"}`))}
	}
	outcome := func(t *testing.T, id string) resumedBy {
		t.Helper()
		res := mustResult(t, boss, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, string(*res.Output))
		var got resumedBy
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		return got
	}
	// refused checks a 403 for a message of sender's, whose detail names why.
	refused := func(t *testing.T, sender *protocol.ClientWithResponses, runID string) {
		t.Helper()
		resp := sendMessage(t, sender, runID, protocol.MessageSend{Topic: "go", Data: ptr(protocol.AnyJSON(`"from a caller"`))})
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "invoke_roles: payments")
		require.Contains(t, string(resp.Body), "the sender's roles (invoker)")
	}

	t.Run("AnEventFromACallerWhoMayNotInvokeLeavesTheRunWaiting", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "guarded", `{"key":"k1"}`)
		waitingFor(t, boss, id)
		receipt := mustSendEvent(t, clerk, payOK("k1", "clerk-k1"))
		require.Nil(t, receipt.Resumed, "clerk may not invoke guarded, so may not resume it")
		// The event is stored all the same.
		ev, err := boss.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: ptr("pay.ok")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, ev.StatusCode(), string(ev.Body))
		require.Contains(t, eventIDs(ev.JSON200.Events), "clerk-k1")
		require.Nil(t, mustSendEvent(t, mallory, payOK("k1", "mallory-k1")).Resumed, "another tenant's admin resumes nothing")
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, boss, id).Status)

		require.Equal(t, []string{id}, *mustSendEvent(t, boss, payOK("k1", "boss-k1")).Resumed)
		require.Equal(t, resumedBy{"event", "boss-k1", "boss"}, outcome(t, id))
	})

	t.Run("AnAdminOfTheTenantResumes", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "guarded", `{"key":"k-admin"}`)
		waitingFor(t, boss, id)
		require.Equal(t, []string{id}, *mustSendEvent(t, admin, payOK("k-admin", "admin-k")).Resumed)
		require.Equal(t, resumedBy{"event", "admin-k", "root"}, outcome(t, id))
	})

	t.Run("AnEventStoredBeforeTheWaitIsNotTakenFromACallerWhoMayNotInvoke", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "gate", `{"key":"k-gate"}`)
		open := <-gates // the invocation runs and has not stored its wait
		require.Nil(t, mustSendEvent(t, clerk, payOK("k-gate", "clerk-gate")).Resumed)
		close(open)
		run := awaitingOrDone(t, boss, id)
		require.Equal(t, protocol.RunStatusSuspended, run.Status, "clerk's event, stored since the invocation began, must not end the wait")
		require.Equal(t, []string{id}, *mustSendEvent(t, boss, payOK("k-gate", "boss-gate")).Resumed)
		require.Equal(t, resumedBy{"event", "boss-gate", "boss"}, outcome(t, id))
	})

	t.Run("AMessageFromACallerWhoMayNotInvokeIsRefused", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "inbox", `{}`)
		receivingOn(t, boss, id, 1)
		refused(t, clerk, id)
		resp := sendMessage(t, mallory, id, protocol.MessageSend{Topic: "go"})
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), "another tenant's run is not found: %s", resp.Body)
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, boss, id).Status)

		receipt := mustSendMessage(t, boss, id, protocol.MessageSend{Topic: "go", ID: ptr("boss-go")})
		require.True(t, receipt.Consumed)
		require.Equal(t, resumedBy{"message", "boss-go", "boss"}, outcome(t, id))
		refused(t, clerk, id) // a finished run's, too: the role is checked first
	})

	t.Run("WaitAnyIsResumedOnlyByWhoMayInvoke", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "either", `{"key":"k-any"}`)
		waitingOn(t, boss, id, protocol.AwaitingKindWaitAny)
		require.Nil(t, mustSendEvent(t, clerk, payOK("k-any", "clerk-any")).Resumed)
		refused(t, clerk, id)
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, boss, id).Status)
		require.Equal(t, []string{id}, *mustSendEvent(t, boss, payOK("k-any", "boss-any")).Resumed)
		require.Equal(t, resumedBy{"event", "boss-any", "boss"}, outcome(t, id))
	})

	t.Run("ResumeRolesAddResumers", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, boss, "hooked", `{"key":"k-hook"}`)
		waitingFor(t, boss, id)
		require.Nil(t, mustSendEvent(t, clerk, payOK("k-hook", "clerk-hook")).Resumed, "clerk has neither role")
		require.Equal(t, []string{id}, *mustSendEvent(t, hook, payOK("k-hook", "hook-k")).Resumed)
		require.Equal(t, resumedBy{"event", "hook-k", "hook"}, outcome(t, id))
		// resume_roles do not let hook start it.
		require.Equal(t, http.StatusForbidden, startRun(t, hook, "hooked", `{"key":"x"}`, &protocol.StartRunParams{}).StatusCode())
	})

	t.Run("ARunActsWithItsCallersIdentity", func(t *testing.T) {
		t.Parallel()
		waiter := startAsync(t, boss, "guarded", `{"key":"k-relay"}`)
		inbox := startAsync(t, boss, "inbox", `{}`)
		waitingFor(t, boss, waiter)
		receivingOn(t, boss, inbox, 1)

		// clerk's relay sends with clerk's identity: its event resumes nothing, its
		// message is refused as the send's error.
		res := mustComplete(t, clerk, "relay", `{"key":"k-relay","to":"`+inbox+`"}`)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, string(*res.Output))
		var got sendAnswer
		require.NoError(t, json.Unmarshal(*res.Output, &got))
		require.Equal(t, "forbidden", got.ErrorType, got.Message)
		require.Contains(t, got.Message, "invoke_roles: payments")
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, boss, waiter).Status)
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, boss, inbox).Status)

		// boss's relay resumes both.
		relay := mustComplete(t, boss, "relay", `{"key":"k-relay","to":"`+inbox+`"}`)
		require.JSONEq(t, `{}`, string(*relay.Output))
		require.Equal(t, resumedBy{"event", relay.ID + ":1", "boss"}, outcome(t, waiter))
		require.Equal(t, resumedBy{"message", relay.ID + ":2", "boss"}, outcome(t, inbox))
	})

	t.Run("EventTriggersStartOnlyWhatTheSenderMayInvoke", func(t *testing.T) {
		t.Parallel()
		start := func(key string) protocol.EventSend {
			return protocol.EventSend{Name: "pay.start", Data: ptr(protocol.AnyJSON(`{"key":"` + key + `"}`))}
		}
		require.Empty(t, mustSendEvent(t, clerk, start("c")).Runs)
		require.Empty(t, mustSendEvent(t, hook, start("h")).Runs, "resume_roles never start a run")
		require.Len(t, mustSendEvent(t, boss, start("b")).Runs, 1)
	})
}

func eventIDs(evs []protocol.Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}
