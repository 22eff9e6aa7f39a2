package functionstest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

func parentApp(t *testing.T) *functions.App {
	app := newApp(t)
	functions.Register(app, "parent", func(ctx context.Context, n int) (int, error) {
		a := step.Invoke[int](ctx, "square", "square", n)
		b := step.Invoke[int](ctx, "square", "square", n+1)
		if err := step.WaitAll(ctx, a, b); err != nil {
			return 0, err
		}
		x, _ := a.Get()
		y, _ := b.Get()
		if err := step.SendEvent(ctx, "squared", x+y); err != nil {
			return 0, err
		}
		return x + y, nil
	})
	functions.Register(app, "square", func(ctx context.Context, n int) (int, error) {
		if err := step.Sleep(ctx, "think", time.Minute); err != nil {
			return 0, err
		}
		return step.Run(ctx, "mul", func(context.Context) (int, error) { return n * n, nil })
	})
	return app
}

func TestChildRunsOfTheApp(t *testing.T) {
	t.Parallel()
	h := functionstest.New(t, parentApp(t))
	run := h.Start("parent", 2)
	require.Equal(t, functionstest.Suspended, run.Result().Status, "the children sleep")
	inv := run.Invoked()
	require.Len(t, inv, 2)
	require.Equal(t, "square", inv[0].Function)
	require.JSONEq(t, `3`, string(inv[1].Input))
	require.Equal(t, functionstest.Suspended, inv[0].Run.Result().Status)

	res := run.Advance(time.Minute)
	require.Equal(t, functionstest.Completed, res.Status)
	require.JSONEq(t, `13`, string(res.Output))
	require.JSONEq(t, `9`, string(run.Invoked()[1].Output))
	require.Equal(t, []string{"invoke square", "invoke square", "event squared"}, kinds(run.Journal()))
	sent := run.SentEvents()
	require.Len(t, sent, 1)
	require.Equal(t, "squared", sent[0].Name)
	require.JSONEq(t, `13`, string(sent[0].Data))
}

func TestStubsAnswerChildren(t *testing.T) {
	t.Parallel()
	h := functionstest.New(t, parentApp(t))
	h.Stub("square", func(in json.RawMessage) (any, error) {
		var n int
		_ = json.Unmarshal(in, &n)
		return n * 10, nil
	})
	run := h.Start("parent", 2)
	require.JSONEq(t, `50`, string(run.Result().Output))
	require.True(t, run.Invoked()[0].Stubbed)

	failing := functionstest.New(t, parentApp(t))
	failing.Stub("square", func(json.RawMessage) (any, error) {
		return nil, &step.Error{Type: "out_of_range", Message: "too big"}
	})
	res := failing.Start("parent", 2).Result()
	require.Equal(t, functionstest.Failed, res.Status)
	require.Contains(t, res.Error.Message, "too big")
}

func TestSendReachesAnotherRun(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "listener", func(ctx context.Context, _ any) (string, error) {
		m, err := step.Receive[string](ctx, "ping").Get()
		return m.Data, err
	})
	functions.Register(app, "pinger", func(ctx context.Context, to string) (any, error) {
		return nil, step.Send(ctx, to, "ping", "hello")
	})
	h := functionstest.New(t, app)
	listener := h.Start("listener", nil)
	pinger := h.Start("pinger", listener.ID())
	require.Equal(t, functionstest.Completed, pinger.Result().Status)
	require.Len(t, pinger.SentMessages(), 1)
	require.Equal(t, listener.ID(), pinger.SentMessages()[0].RunID)
	require.JSONEq(t, `"hello"`, string(listener.Result().Output))
}
