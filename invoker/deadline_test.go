package invoker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
)

// TestDeadlineTimers: the gateway that starts a run arms a timer for its deadline when
// it is within the maintenance passes' lead (2 s here), and stops it when the run ends
// first; a deadline an hour away holds no timer until a pass arms it as it nears, and
// then fails the run on time, without its River job (due an hour later here).
func TestDeadlineTimers(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "nap", func(ctx context.Context, _ struct{}) (string, error) {
		return "awake", step.Sleep(ctx, "nap", time.Hour)
	})
	functions.Register(app, "hello", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil })
	s.Sync(t, s.ServeApp(t, app))
	db := journal.ForTenant(s.APIPool, auth.DefaultTenant)
	start := func(function string, deadline time.Duration) *journal.Run {
		run, created, err := s.Invoker.StartRun(t.Context(), db, journal.NewRun{
			ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: function, Input: []byte(`{}`),
			Identity: access.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"developer"}},
			Deadline: new(time.Now().Add(deadline)),
		})
		require.NoError(t, err)
		require.True(t, created)
		return run
	}
	await := func(id string) *journal.Run {
		got, err := s.Invoker.AwaitRun(t.Context(), db, id, nil, time.Now().Add(30*time.Second))
		require.NoError(t, err)
		return got
	}

	t.Run("ArmedByTheGatewayThatStartsIt", func(t *testing.T) {
		t.Parallel()
		run := start("nap", 1900*time.Millisecond)
		require.True(t, s.Invoker.DeadlineTimerArmed(run.ID), "a deadline within the lead")
		got := await(run.ID)
		require.Equal(t, journal.StatusFailed, got.Status)
		require.Equal(t, invoker.ErrorTypeDeadline, got.Error.Type)
		require.False(t, got.FinishedAt.Before(*got.Deadline))
		require.False(t, s.Invoker.DeadlineTimerArmed(run.ID))
	})

	t.Run("StoppedWhenTheRunEndsFirst", func(t *testing.T) {
		t.Parallel()
		run := start("hello", 1900*time.Millisecond)
		got := await(run.ID)
		require.Equal(t, journal.StatusCompleted, got.Status)
		require.False(t, s.Invoker.DeadlineTimerArmed(run.ID), "its timer is stopped with the run's end")
	})

	t.Run("ArmedByAPassAsItNears", func(t *testing.T) {
		t.Parallel()
		run := start("nap", time.Hour)
		require.False(t, s.Invoker.DeadlineTimerArmed(run.ID), "a deadline an hour away holds no timer")
		// As if the hour had nearly passed: beyond the passes' lead (2 s) still.
		_, err := s.Pool.Exec(t.Context(), `UPDATE stepgate.run SET deadline = now() + interval '3 seconds' WHERE id = $1`, run.ID)
		require.NoError(t, err)
		got := await(run.ID)
		require.Equal(t, journal.StatusFailed, got.Status, "a pass armed its timer")
		require.Equal(t, invoker.ErrorTypeDeadline, got.Error.Type)
	})
}
