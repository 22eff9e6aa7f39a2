package functions_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// TestReplayOnlyEdges checks the replay-only cases docs/protocol.md ("Replay-only
// invocations") states beyond TestReplayOnly's: a journaled sleep whose wake time is
// still an hour away is over, even for a function that waits sleeps out in its process
// (a normal invocation would wait for it); a step being retried (step_attempts) is past
// the journal, so next names the step, never a retry.
func TestReplayOnlyEdges(t *testing.T) {
	t.Parallel()
	run := func(ctx context.Context, name string) error {
		_, err := step.Run(ctx, name, func(context.Context) (int, error) {
			panic("a replay-only invocation runs no step body")
		})
		return err
	}
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "napper", func(ctx context.Context, _ empty) (int, error) {
			if err := run(ctx, "a"); err != nil {
				return 0, err
			}
			if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
				return 0, err
			}
			return 1, run(ctx, "b")
		}, functions.SleepInProcess(2*time.Hour))
		functions.Register(app, "retried", func(ctx context.Context, _ empty) (int, error) {
			if err := run(ctx, "a"); err != nil {
				return 0, err
			}
			return 1, run(ctx, "b")
		})
	})

	t.Run("SleepNotYetDue", func(t *testing.T) {
		t.Parallel()
		wake := time.Now().Add(time.Hour).UTC()
		for _, e := range []protocol.JournalEntry{entry(1, "a", `1`),
			{Seq: 2, Kind: protocol.EntryKindSleep, Name: "nap", Until: &wake}} {
			code, msg := g.Append("run-nap", e)
			require.Equal(t, http.StatusOK, code, msg)
		}
		req := gatewaytest.ReplayOnly(g.Request("run-nap", "napper", `{}`))
		req.Deadline = new(time.Now().Add(24 * time.Hour))
		r := g.Invoke(url+"/napper", req)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.Equal(t, next(3, "step", "b"), *r.Answer.Replay, string(r.Body))
	})

	t.Run("StepBeingRetried", func(t *testing.T) {
		t.Parallel()
		code, msg := g.Append("run-retried", entry(1, "a", `1`))
		require.Equal(t, http.StatusOK, code, msg)
		req := gatewaytest.ReplayOnly(g.Request("run-retried", "retried", `{}`))
		req.StepAttempts = &map[string]int{"2": 2}
		r := g.Invoke(url+"/retried", req)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.Equal(t, next(2, "step", "b"), *r.Answer.Replay, string(r.Body))
	})
}
