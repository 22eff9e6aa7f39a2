package invoker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

// TestDeadlineTimers: the gateway that starts a run arms a timer for its deadline when
// it is within the maintenance passes' lead (2 s here); a deadline an hour away holds no
// timer until a pass arms it as it nears, and then fails the run on time, without its
// River job (due an hour later here).
func TestDeadlineTimers(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "nap", func(ctx context.Context, _ struct{}) (string, error) {
		return "awake", step.Sleep(ctx, "nap", time.Hour)
	})
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

// TestDeadlineTimersOfTriggeredRuns: a run started by an event, through flow control or
// not, or by a schedule's tick, has its deadline's timer armed by the gateway that
// started it, as a run started through the API has; a run that ends first has it
// stopped. The maintenance passes, an hour apart here (their lead is 2 h), arm none of
// them.
func TestDeadlineTimersOfTriggeredRuns(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{MaintainInterval: time.Hour})
	app := s.NewApp()
	nap := func(ctx context.Context, _ any) (string, error) {
		return "awake", step.Sleep(ctx, "nap", time.Hour)
	}
	functions.Register(app, "nap", nap, functions.RunTimeout(time.Hour), functions.OnEvent("nap.go"))
	functions.Register(app, "nap.throttled", nap, functions.RunTimeout(time.Hour), functions.OnEvent("nap.go"),
		functions.Throttle(functions.Rate{Limit: 100, Period: time.Second}))
	functions.Register(app, "hello", func(ctx context.Context, _ any) (string, error) { return "hi", nil },
		functions.RunTimeout(time.Hour))
	s.Sync(t, s.ServeApp(t, app))
	db := journal.ForTenant(s.APIPool, auth.DefaultTenant)
	ada := access.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"developer"}}

	t.Run("StartedByAnEvent", func(t *testing.T) {
		t.Parallel()
		ev, created, err := s.Invoker.SendEvent(t.Context(), db, journal.NewEvent{
			Tenant: auth.DefaultTenant, ID: uuid.NewString(), Name: "nap.go", Data: []byte(`{}`), Identity: ada,
		})
		require.NoError(t, err)
		require.True(t, created)
		require.Len(t, ev.Runs, 2)
		for _, id := range ev.Runs {
			require.True(t, s.Invoker.DeadlineTimerArmed(id), "run %s, started by an event", id)
		}
	})

	t.Run("StartedByASchedule", func(t *testing.T) {
		t.Parallel()
		spec, err := invoker.ParseCron("@every 1s", "")
		require.NoError(t, err)
		_, err = s.Invoker.Schedules().Put(t.Context(), db, schedule.NewSchedule{
			ID: uuid.NewString(), Tenant: auth.DefaultTenant, Name: "naps", Function: "nap", Cron: "@every 1s",
			Input: []byte(`{}`), Identity: ada, Next: spec.Next,
		})
		require.NoError(t, err)
		var id string
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, s.Pool.QueryRow(t.Context(),
				`SELECT id::text FROM stepgate.run WHERE idempotency_key LIKE 'schedule:naps:%' LIMIT 1`).Scan(&id))
		}, 30*time.Second, 5*time.Millisecond, "the schedule's first tick starts a run")
		// Armed once the tick's transaction has committed, just after the run shows.
		require.Eventually(t, func() bool { return s.Invoker.DeadlineTimerArmed(id) }, 30*time.Second,
			time.Millisecond, "run %s, started by a schedule's tick", id)
	})

	t.Run("StoppedWhenTheRunEndsFirst", func(t *testing.T) {
		t.Parallel()
		run, created, err := s.Invoker.StartRun(t.Context(), db, journal.NewRun{
			ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "hello", Input: []byte(`{}`),
			Identity: ada,
		})
		require.NoError(t, err)
		require.True(t, created)
		require.True(t, s.Invoker.DeadlineTimerArmed(run.ID), "an hour is within the lead")
		got, err := s.Invoker.AwaitRun(t.Context(), db, run.ID, nil, time.Now().Add(30*time.Second))
		require.NoError(t, err)
		require.Equal(t, journal.StatusCompleted, got.Status)
		// Stopped once the answer has committed, just after waiters can see the end; its
		// deadline is an hour away.
		require.Eventually(t, func() bool { return !s.Invoker.DeadlineTimerArmed(run.ID) }, 30*time.Second,
			time.Millisecond, "its timer is stopped with the run's end")
	})
}
