package functionstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

func TestSendEventResumesTheWait(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "await", func(ctx context.Context, _ any) (int, error) {
		ev, err := step.WaitForEvent[struct{ Amount int }](ctx, "paid", "order.paid").Get()
		return ev.Data.Amount, err
	})
	h := functionstest.New(t, app)
	run := h.Start("await", nil)
	require.Equal(t, functionstest.Suspended, run.Result().Status)
	require.Equal(t, 0, h.SendEvent("order.shipped", nil), "another event resumed the wait")
	res := run.SendEvent("order.paid", map[string]int{"Amount": 42})
	require.Equal(t, functionstest.Completed, res.Status)
	require.JSONEq(t, `42`, string(res.Output))
	require.Equal(t, []string{"wait_event paid"}, kinds(run.Journal()))
}

func TestSendMessageBeforeAndDuringReceive(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "inbox", func(ctx context.Context, _ any) ([]string, error) {
		var got []string
		for range 2 {
			m, err := step.Receive[string](ctx, "notes").Get()
			if err != nil {
				return nil, err
			}
			got = append(got, m.Data)
		}
		return got, nil
	})
	run := functionstest.New(t, app).Start("inbox", nil)
	require.Equal(t, functionstest.Suspended, run.SendMessage("notes", "one").Status)
	res := run.SendMessage("notes", "two")
	require.Equal(t, functionstest.Completed, res.Status)
	require.JSONEq(t, `["one","two"]`, string(res.Output))
}

func TestCallbacksResolveAndReject(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "approve", func(ctx context.Context, _ any) (string, error) {
		cb, err := step.Callback[string](ctx, "approval")
		if err != nil {
			return "", err
		}
		v, err := cb.Result().Get()
		if se, ok := errors.AsType[*step.Error](err); ok {
			return "rejected: " + se.Type, nil
		}
		return v, err
	})
	h := functionstest.New(t, app)
	ok := h.Start("approve", nil)
	require.Equal(t, functionstest.Suspended, ok.Result().Status)
	require.JSONEq(t, `"yes"`, string(ok.ResolveCallback("approval", "yes").Output))
	no := h.Start("approve", nil)
	require.JSONEq(t, `"rejected: denied"`, string(no.RejectCallback("approval", "denied", "no way").Output))
	byDefault := h.Start("approve", nil)
	require.JSONEq(t, `"rejected: rejected"`, string(byDefault.RejectCallback("approval", "", "no").Output))
}

func TestSendRequestReturnsTheReply(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "counter", func(ctx context.Context, _ any) (int, error) {
		total := 0
		for {
			req, err := step.ReceiveRequest[int](ctx, "add").Get()
			if err != nil {
				return 0, err
			}
			if req.Data == 0 {
				return total, step.Reply(ctx, req.ID, "bye")
			}
			total += req.Data
			if err := step.Reply(ctx, req.ID, total); err != nil {
				return 0, err
			}
		}
	})
	run := functionstest.New(t, app).Start("counter", nil)
	reply, rerr, ok := run.SendRequest("add", 5)
	require.True(t, ok)
	require.Nil(t, rerr)
	require.JSONEq(t, `5`, string(reply))
	reply, _, _ = run.SendRequest("add", 3)
	require.JSONEq(t, `8`, string(reply))
	_, _, _ = run.SendRequest("add", 0)
	require.JSONEq(t, `8`, string(run.Result().Output))
}

func TestWaitFirstTakesTheFirstDelivered(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "race", func(ctx context.Context, _ any) (string, error) {
		paid := step.WaitForEvent[any](ctx, "paid", "order.paid")
		cancel := step.Receive[any](ctx, "cancel")
		timer := step.After(ctx, "expire", time.Hour)
		i, err := step.WaitFirst(ctx, "first", paid, cancel, timer)
		return []string{"paid", "cancelled", "expired"}[i], err
	})
	h := functionstest.New(t, app)
	byMessage := h.Start("race", nil)
	byEvent := h.Start("race", nil)
	alsoWaiting := h.Start("race", nil)
	require.JSONEq(t, `"cancelled"`, string(byMessage.SendMessage("cancel", nil).Output))
	require.Equal(t, 2, h.SendEvent("order.paid", nil), "the event resumes the two runs still waiting")
	require.JSONEq(t, `"paid"`, string(byEvent.Result().Output))
	require.JSONEq(t, `"paid"`, string(alsoWaiting.Result().Output))
	late := h.Start("race", nil)
	require.JSONEq(t, `"expired"`, string(late.Advance(time.Hour).Output))
	require.Equal(t, []string{"wait_any first"}, kinds(late.Journal()))
}

func TestEventMatchAndLookBack(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "order", func(ctx context.Context, id string) (float64, error) {
		if err := step.Sleep(ctx, "settle", time.Hour); err != nil {
			return 0, err
		}
		ev, err := step.WaitForEvent[struct{ Total float64 }](ctx, "paid", "order.paid",
			step.Matching(step.Match{"data.id": id}), step.SinceStart()).Get()
		return ev.Data.Total, err
	})
	h := functionstest.New(t, app)
	h.SendEvent("order.paid", map[string]any{"id": "o-2", "Total": 2}) // before its run: not looked back at
	late := h.Start("order", "o-2")
	early := h.Start("order", "o-1")
	h.SendEvent("order.paid", map[string]any{"id": "o-1", "Total": 1.5}) // while o-1 sleeps
	h.Advance(time.Hour)
	require.JSONEq(t, `1.5`, string(early.Result().Output), "the look-back missed the event sent while it slept")
	require.Equal(t, functionstest.Suspended, late.Result().Status, "an event from before the run matched")
	h.SendEvent("order.paid", map[string]any{"Total": 0})
	require.Equal(t, functionstest.Suspended, late.Result().Status, "an event without the path matched")
	require.JSONEq(t, `2`, string(late.SendEvent("order.paid", map[string]any{"id": "o-2", "Total": 2}).Output))
}
