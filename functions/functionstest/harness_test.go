package functionstest_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// newApp returns an app that needs no signatures, logging to the test's output.
func newApp(t *testing.T) *functions.App {
	return functions.New(functions.Config{InsecureSkipVerify: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
}

func kinds(j []protocol.JournalEntry) []string {
	var out []string
	for _, e := range j {
		out = append(out, string(e.Kind)+" "+e.Name)
	}
	return out
}

func TestStepsAreJournaled(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "double", func(ctx context.Context, n int) (int, error) {
		a, err := step.Run(ctx, "a", func(context.Context) (int, error) { return n * 2, nil })
		if err != nil {
			return 0, err
		}
		return step.Run(ctx, "b", func(context.Context) (int, error) { return a + 1, nil })
	})
	h := functionstest.New(t, app)
	run := h.Start("double", 20)
	res := run.Result()
	require.Equal(t, functionstest.Completed, res.Status)
	var out int
	require.NoError(t, res.Decode(&out))
	require.Equal(t, 41, out)
	require.Equal(t, []string{"step a", "step b"}, kinds(run.Journal()))
	require.JSONEq(t, `40`, string(*run.Journal()[0].Output))
}

func TestRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	calls := 0
	functions.Register(app, "flaky", func(ctx context.Context, _ any) (int, error) {
		return step.Run(ctx, "try", func(context.Context) (int, error) {
			if calls++; calls < 3 {
				return 0, errors.New("not yet")
			}
			return calls, nil
		}, step.MaxAttempts(3))
	})
	run := functionstest.New(t, app).Start("flaky", nil)
	res := run.Result()
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res.Error)
	require.Equal(t, 3, calls)
	require.Equal(t, []string{"step try"}, kinds(run.Journal()))
}

func TestFinalStepErrorFailsTheRun(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	calls := 0
	functions.Register(app, "doomed", func(ctx context.Context, _ any) (int, error) {
		return step.Run(ctx, "try", func(context.Context) (int, error) {
			calls++
			return 0, errors.New("always")
		}, step.MaxAttempts(2))
	})
	res := functionstest.New(t, app).Start("doomed", nil).Result()
	require.Equal(t, functionstest.Failed, res.Status)
	require.Equal(t, 2, calls)
	require.Contains(t, res.Error.Message, "always")
}

func TestNonRetryableFailsAtOnce(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	calls := 0
	functions.Register(app, "refuse", func(ctx context.Context, _ any) (int, error) {
		return step.Run(ctx, "try", func(context.Context) (int, error) {
			calls++
			return 0, step.NonRetryable(errors.New("bad input"))
		}, step.MaxAttempts(5))
	})
	res := functionstest.New(t, app).Start("refuse", nil).Result()
	require.Equal(t, functionstest.Failed, res.Status)
	require.Equal(t, 1, calls)
	require.Equal(t, step.ErrorTypeNonRetryable, res.Error.Type)
}

func TestInvocationErrorsAreRetriedThenFail(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	calls := 0
	functions.Register(app, "broken", func(ctx context.Context, _ any) (int, error) {
		calls++
		return 0, errors.New("transient")
	}, functions.InvocationAttempts(4))
	res := functionstest.New(t, app).Start("broken", nil).Result()
	require.Equal(t, functionstest.Failed, res.Status)
	require.Equal(t, 4, calls)
	require.Equal(t, 4, res.Invocations)
}

func TestSleepUsesTheVirtualClock(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "weekly", func(ctx context.Context, _ any) (string, error) {
		if err := step.Sleep(ctx, "week", 7*24*time.Hour); err != nil {
			return "", err
		}
		return "done", nil
	})
	h := functionstest.New(t, app)
	start := time.Now()
	run := h.Start("weekly", nil)
	res := run.Result()
	require.Equal(t, functionstest.Suspended, res.Status)
	require.Equal(t, protocol.AwaitTypeSleep, res.Await.Type)
	require.Equal(t, h.Now().Add(7*24*time.Hour), res.WakeAt)

	require.Equal(t, functionstest.Suspended, run.Advance(7*24*time.Hour-time.Second).Status, "woke early")
	res = run.Advance(time.Second)
	require.Equal(t, functionstest.Completed, res.Status)
	require.JSONEq(t, `"done"`, string(res.Output))
	require.Equal(t, []string{"sleep week"}, kinds(run.Journal()))
	t.Logf("a week's sleep took %v", time.Since(start))
}

func TestAtAndWaitTimeouts(t *testing.T) {
	t.Parallel()
	app := newApp(t)
	functions.Register(app, "deadline", func(ctx context.Context, at time.Time) (string, error) {
		if err := step.SleepUntil(ctx, "until", at); err != nil {
			return "", err
		}
		_, err := step.WaitForEvent[any](ctx, "paid", "order.paid", step.Timeout(time.Hour)).Get()
		if errors.Is(err, step.ErrTimedOut) {
			return "timed out", nil
		}
		return "paid", err
	})
	h := functionstest.New(t, app)
	run := h.Start("deadline", h.Now().Add(48*time.Hour))
	require.Equal(t, h.Now().Add(48*time.Hour), run.Result().WakeAt)
	res := run.Advance(48 * time.Hour)
	require.Equal(t, functionstest.Suspended, res.Status)
	require.Equal(t, protocol.AwaitTypeWaitEvent, res.Await.Type)
	res = run.Advance(time.Hour)
	require.Equal(t, functionstest.Completed, res.Status)
	require.JSONEq(t, `"timed out"`, string(res.Output))
}
