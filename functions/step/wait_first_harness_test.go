package step_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// TestWaitFirstDeadlinesWithTheHarness runs WaitFirst of several deadlines and of
// receives of one topic in functionstest, whose virtual clock times waits out as the
// gateway does; a step that fails once after WaitFirst makes the next invocation replay
// its choice.
func TestWaitFirstDeadlinesWithTheHarness(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]int{}
	see := func(ctx context.Context, i int) error {
		id := functions.RunFrom(ctx).ID
		mu.Lock()
		seen[id] = append(seen[id], i)
		mu.Unlock()
		_, err := step.Run(ctx, "flaky", func(ctx context.Context) (int, error) {
			if step.Attempt(ctx) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return 1, nil
		}, step.MaxAttempts(2))
		return err
	}
	app := functions.New(functions.Config{InsecureSkipVerify: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	functions.Register(app, "durations", func(ctx context.Context, _ struct{}) (chosen, error) {
		fs := []step.Waitable{
			step.After(ctx, "late", time.Hour),
			step.Receive[string](ctx, "cancel", step.Timeout(10*time.Minute)),
			step.WaitForEvent[string](ctx, "paid", "orders.paid"),
		}
		i, err := step.WaitFirst(ctx, "first", fs...)
		if err != nil {
			return chosen{}, err
		}
		if err := see(ctx, i); err != nil {
			return chosen{}, err
		}
		return outcome(i, fs[i]), nil
	})
	functions.Register(app, "mixed", func(ctx context.Context, deadline time.Time) (chosen, error) {
		fs := []step.Waitable{
			step.Receive[string](ctx, "cancel"),
			step.At(ctx, "deadline", deadline),
			step.After(ctx, "hour", time.Hour),
		}
		i, err := step.WaitFirst(ctx, "first", fs...)
		if err != nil {
			return chosen{}, err
		}
		if err := see(ctx, i); err != nil {
			return chosen{}, err
		}
		return outcome(i, fs[i]), nil
	})
	functions.Register(app, "topic", func(ctx context.Context, _ struct{}) ([]chosen, error) {
		a, b := step.Receive[string](ctx, "t"), step.Receive[string](ctx, "t")
		i, err := step.WaitFirst(ctx, "first", a, b, step.After(ctx, "late", time.Hour))
		if err != nil {
			return nil, err
		}
		if err := see(ctx, i); err != nil {
			return nil, err
		}
		return []chosen{outcome(i, []step.Waitable{a, b}[i]), outcome(1, b)}, nil
	})
	h := functionstest.New(t, app)
	indexes := func(run *functionstest.Run) []int {
		mu.Lock()
		defer mu.Unlock()
		return seen[run.ID()]
	}
	kinds := func(run *functionstest.Run) []string {
		var out []string
		for _, e := range run.Journal() {
			out = append(out, string(e.Kind)+" "+e.Name)
		}
		return out
	}

	t.Run("AWaitsOwnTimeoutPassesFirst", func(t *testing.T) {
		run := h.Start("durations", struct{}{})
		res := run.Result()
		require.Equal(t, functionstest.Suspended, res.Status)
		require.Equal(t, "10m0s", *res.Await.Timeout)
		res = run.Advance(10 * time.Minute)
		var got chosen
		require.NoError(t, res.Decode(&got))
		require.Equal(t, 1, got.Index)
		require.True(t, got.TimedOut, "%+v", got)
		require.Equal(t, []int{1, 1}, indexes(run), "the replay chose the same")
		require.Equal(t, []string{"wait_any first", "step flaky"}, kinds(run))
	})

	t.Run("DurationsAndTimes", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			deadline time.Duration // from now
			advance  time.Duration
			want     int
		}{
			{"TheHourBeforeTheDeadline", 2 * time.Hour, time.Hour, 2},
			{"TheDeadlineBeforeTheHour", 30 * time.Minute, 30 * time.Minute, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				run := h.Start("mixed", time.Now().Add(tc.deadline))
				res := run.Result()
				require.Equal(t, functionstest.Suspended, res.Status)
				require.Equal(t, []string{"step first"}, kinds(run), "the time it waits from is journaled")
				require.Equal(t, protocol.AwaitTypeWaitAny, res.Await.Type)
				require.Equal(t, 2, res.Await.Seq)
				var got chosen
				require.NoError(t, run.Advance(tc.advance).Decode(&got))
				require.Equal(t, chosen{Index: tc.want, Got: "timer"}, got)
				require.Equal(t, []int{tc.want, tc.want}, indexes(run), "the replay chose the same")
				require.Equal(t, []string{"step first", "wait_any first", "step flaky"}, kinds(run))
			})
		}
	})

	t.Run("AMessageEndsTheFirstReceiveOfItsTopic", func(t *testing.T) {
		run := h.Start("topic", struct{}{})
		aw := run.Result().Await
		require.Len(t, *aw.Of, 1)
		res := run.SendMessage("t", "one")
		require.Equal(t, functionstest.Suspended, res.Status, "the second receive waits anew")
		require.Equal(t, protocol.AwaitTypeReceive, res.Await.Type)
		var got []chosen
		require.NoError(t, run.SendMessage("t", "two").Decode(&got))
		require.Equal(t, []chosen{{Index: 0, Got: "one"}, {Index: 1, Got: "two"}}, got)
		require.Equal(t, []int{0, 0, 0}, indexes(run), "every replay chose the same")
	})
}
