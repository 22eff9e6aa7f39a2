package functionstest_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol/signature"
)

func TestEventOfARunResumesAnother(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "waiter", func(ctx context.Context, _ any) (string, error) {
		ev, err := step.WaitForEvent[string](ctx, "go", "go").Get()
		return ev.Data, err
	})
	functions.Register(app, "starter", func(ctx context.Context, _ any) (any, error) {
		return nil, step.SendEvent(ctx, "go", "now")
	})
	h := functionstest.New(t, app)
	waiter := h.Start("waiter", nil)
	h.Start("starter", nil)
	require.JSONEq(t, `"now"`, string(waiter.Result().Output))
}

func TestCrashAfterArmedWhileSuspended(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	calls := map[string]int{}
	functions.Register(app, "nap", func(ctx context.Context, _ any) (int, error) {
		if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
			return 0, err
		}
		for _, name := range []string{"a", "b"} {
			if _, err := step.Run(ctx, name, func(context.Context) (int, error) { calls[name]++; return 0, nil }); err != nil {
				return 0, err
			}
		}
		return 0, nil
	})
	run := functionstest.New(t, app).Start("nap", nil)
	run.CrashAfter(2) // step a, in the invocation after the sleep
	res := run.Advance(time.Hour)
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res.Error)
	require.Equal(t, 3, res.Invocations, "the sleep's, the crashed one and its replay")
	require.Equal(t, map[string]int{"a": 1, "b": 1}, calls)
}

func TestCrashesUseTheInvocationAttempts(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "one", func(ctx context.Context, _ any) (int, error) {
		return step.Run(ctx, "a", func(context.Context) (int, error) { return 1, nil })
	}, functions.InvocationAttempts(1))
	res := functionstest.New(t, app).StartCrashing("one", nil, 1).Result()
	require.Equal(t, functionstest.Failed, res.Status)
	require.Equal(t, "crashed", res.Error.Type)
}

func TestWithKeySignsInvocations(t *testing.T) {
	t.Parallel()
	key := &signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{key.Ed25519.Public().(ed25519.PublicKey)}})
	functions.Register(app, "hi", func(ctx context.Context, _ any) (string, error) {
		return step.Run(ctx, "hi", func(context.Context) (string, error) { return "hi", nil })
	})
	run := functionstest.New(t, app, functionstest.WithKey(key)).StartCrashing("hi", nil, 1)
	require.JSONEq(t, `"hi"`, string(run.Result().Output))
}

func TestWaitFirstOfACallback(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "approve", func(ctx context.Context, _ any) (string, error) {
		cb, err := step.Callback[string](ctx, "approval")
		if err != nil {
			return "", err
		}
		i, err := step.WaitFirst(ctx, "first", step.After(ctx, "expire", time.Hour), cb.Result())
		if err != nil || i == 0 {
			return "expired", err
		}
		return cb.Result().Get()
	})
	h := functionstest.New(t, app)
	run := h.Start("approve", nil)
	require.JSONEq(t, `"ok"`, string(run.ResolveCallback("approval", "ok").Output))
	require.JSONEq(t, `"expired"`, string(h.Start("approve", nil).Advance(time.Hour).Output))
}

func TestCallbacksExpireOnTheVirtualClock(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "expiring", func(ctx context.Context, hours int) (string, error) {
		var opts []step.Option
		if hours > 0 {
			opts = append(opts, step.Timeout(time.Duration(hours)*time.Hour))
		}
		cb, err := step.Callback[string](ctx, "approval", opts...)
		if err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "first", time.Hour); err != nil {
			return "", err
		}
		v, err := cb.Result().Get()
		if errors.Is(err, step.ErrTimedOut) {
			return "expired", nil
		}
		return v, err
	})
	h := functionstest.New(t, app)
	short := h.Start("expiring", 3)
	long := h.Start("expiring", 0)
	start := h.Now()
	h.Advance(time.Hour)
	require.Equal(t, start.Add(3*time.Hour), short.Result().WakeAt, "expiry counts from the callback's creation")
	require.Equal(t, start.Add(functionstest.DefaultCallbackTimeout), long.Result().WakeAt)
	require.JSONEq(t, `"expired"`, string(short.Advance(2*time.Hour).Output))
	require.Equal(t, functionstest.Suspended, long.Result().Status)
	require.JSONEq(t, `"expired"`, string(long.Advance(functionstest.DefaultCallbackTimeout).Output))
}
