package gateway_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRunCounts: a run's invocations, failed invocations and recoveries say what their
// names say, in a run and in the runs list.
func TestRunCounts(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	app := s.NewApp()
	functions.Register(app, "counts.sleepy", func(ctx context.Context, _ struct{}) (int, error) {
		sum := 0
		for i, nap := range []string{"", "first nap", "second nap"} {
			if nap != "" {
				if err := step.Sleep(ctx, nap, 10*time.Millisecond); err != nil {
					return 0, err
				}
			}
			n, err := step.Run(ctx, "step "+string(rune('a'+i)), func(context.Context) (int, error) { return i, nil })
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	})
	functions.Register(app, "counts.once", func(ctx context.Context, _ struct{}) (string, error) { return "ok", nil },
		functions.InvocationAttempts(3), functions.InvocationBackoff(10*time.Millisecond, 10*time.Millisecond))
	var hits atomic.Int32
	s.Sync(t, s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/counts.once" && hits.Add(1) == 1 {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		app.ServeHTTP(w, r)
	})))

	// listed returns the run id as the runs list shows it.
	listed := func(t *testing.T, function, id string) protocol.Run {
		t.Helper()
		resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: &function})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		for _, r := range resp.JSON200.Runs {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("run %s is not listed", id)
		return protocol.Run{}
	}

	t.Run("TwoSleepsAreThreeInvocationsNoneFailed", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "counts.sleepy", `{}`)
		require.JSONEq(t, `3`, string(*res.Output))
		run := getRun(t, c, res.ID)
		require.Equal(t, 3, run.Invocations, "one before each sleep, one after the last")
		require.Zero(t, run.FailedInvocations)
		require.Zero(t, run.Recoveries)
		l := listed(t, "counts.sleepy", res.ID)
		require.Equal(t, []int{3, 0, 0}, []int{l.Invocations, l.FailedInvocations, l.Recoveries})
	})

	t.Run("OneFailedInvocationThenSuccess", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "counts.once", `{}`)
		run := getRun(t, c, res.ID)
		require.Equal(t, 2, run.Invocations)
		require.Equal(t, 1, run.FailedInvocations, "the HTTP 500, retried")
		require.Zero(t, run.Recoveries)
		require.Len(t, run.Failures, 1)
		l := listed(t, "counts.once", res.ID)
		require.Equal(t, []int{2, 1, 0}, []int{l.Invocations, l.FailedInvocations, l.Recoveries})
	})
}
