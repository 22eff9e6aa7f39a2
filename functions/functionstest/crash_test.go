package functionstest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

// threeSteps registers "three", whose steps count their calls in calls.
func threeSteps(app *functions.App, calls map[string]int, opts ...functions.Option) {
	functions.Register(app, "three", func(ctx context.Context, _ any) (int, error) {
		total := 0
		for _, name := range []string{"a", "b", "c"} {
			n, err := step.Run(ctx, name, func(context.Context) (int, error) {
				calls[name]++
				return len(name), nil
			})
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}, opts...)
}

func TestCrashAfterReplaysEachStepOnce(t *testing.T) {
	t.Parallel()
	for seq := 1; seq <= 3; seq++ {
		calls := map[string]int{}
		app := newApp(t)
		threeSteps(app, calls)
		run := functionstest.New(t, app).StartCrashing("three", nil, seq)
		res := run.Result()
		require.Equal(t, functionstest.Completed, res.Status, "crash after %d: %+v", seq, res.Error)
		require.Equal(t, 2, res.Invocations, "crash after %d: the crash costs one invocation", seq)
		require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, calls, "crash after %d", seq)
		require.Equal(t, []string{"step a", "step b", "step c"}, kinds(run.Journal()))
	}
}

func TestCrashAfterALazyStep(t *testing.T) {
	t.Parallel()
	calls := map[string]int{}
	app := newApp(t)
	threeSteps(app, calls, functions.LazyCheckpoints())
	run := functionstest.New(t, app).StartCrashing("three", nil, 3)
	res := run.Result()
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res.Error)
	require.Equal(t, 2, res.Invocations)
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, calls)
}
