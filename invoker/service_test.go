package invoker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

// The run service's transitions, called as the gateway calls them: each owns its
// transaction, its River jobs and this process's waiters.
func TestRunService(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "greet", func(ctx context.Context, in struct{ Name string }) (string, error) {
		return "hi " + in.Name, nil
	})
	functions.Register(app, "on-signup", func(ctx context.Context, _ json.RawMessage) (string, error) {
		return "welcomed", nil
	}, functions.OnEvent("user.signup"))
	functions.Register(app, "billing-only", func(ctx context.Context, _ struct{}) (string, error) { return "", nil },
		functions.InvokeRoles("billing"))
	s.Sync(t, s.ServeApp(t, app))
	tenant := auth.DefaultTenant
	db := journal.ForTenant(s.APIPool, tenant)
	who := access.Identity{Subject: "ada", Tenant: tenant, Roles: []string{"developer"}}
	newRun := func(function, input string) journal.NewRun {
		return journal.NewRun{ID: uuid.Must(uuid.NewV7()).String(), Tenant: tenant, Function: function, Input: json.RawMessage(input), Identity: who}
	}
	await := func(t *testing.T, id string) *journal.Run {
		t.Helper()
		run, err := s.Invoker.AwaitRun(t.Context(), db, id, nil, time.Now().Add(30*time.Second))
		require.NoError(t, err)
		require.True(t, run.Status.Terminal(), "run %s is %s after 30s", id, run.Status)
		return run
	}

	t.Run("StartRunQueuesWithItsJob", func(t *testing.T) {
		t.Parallel()
		n := newRun("greet", `{"name":"ada"}`)
		n.IdempotencyKey = "k-" + n.ID
		run, created, err := s.Invoker.StartRun(t.Context(), db, n)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, journal.StatusQueued, run.Status)
		require.JSONEq(t, `"hi ada"`, string(await(t, run.ID).Output), "its job ran it")

		again := n
		again.ID = uuid.Must(uuid.NewV7()).String()
		same, created, err := s.Invoker.StartRun(t.Context(), db, again)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, run.ID, same.ID, "the key's run")
		var jobs int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE args->>'run_id' = $1`, run.ID).Scan(&jobs))
		require.Equal(t, 1, jobs, "no second job for the same run")
	})

	t.Run("StartRunNowInvokesInThisProcess", func(t *testing.T) {
		t.Parallel()
		var ended atomic.Int32
		run, created, done, err := s.Invoker.StartRunNow(t.Context(), db, newRun("greet", `{"name":"bo"}`), func() { ended.Add(1) })
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, journal.StatusRunning, run.Status, "created claimed")
		res := <-done
		require.NotNil(t, res)
		require.Equal(t, journal.StatusCompleted, res.Status)
		require.JSONEq(t, `"hi bo"`, string(res.Output))
		require.EqualValues(t, 1, ended.Load())

		_, _, done, err = s.Invoker.StartRunNow(t.Context(), db, newRun("billing-only", `{}`), func() { ended.Add(1) })
		require.ErrorIs(t, err, journal.ErrForbidden, "the function's invoke_roles exclude a developer")
		require.Nil(t, done)
		require.EqualValues(t, 2, ended.Load(), "end is called when no invocation starts")
	})

	t.Run("CancelRun", func(t *testing.T) {
		t.Parallel()
		n := newRun("greet", `{"name":"cy"}`)
		_, _, err := journal.CreateRun(t.Context(), db, n) // queued with no job: it waits
		require.NoError(t, err)
		cancelled, err := s.Invoker.CancelRun(t.Context(), db, n.ID, who)
		require.NoError(t, err)
		require.Equal(t, journal.StatusCancelled, cancelled.Status)
		require.Equal(t, "ada", cancelled.CancelledBy.Subject)
		again, err := s.Invoker.CancelRun(t.Context(), db, n.ID, who)
		require.ErrorIs(t, err, journal.ErrFinished)
		require.Equal(t, journal.StatusCancelled, again.Status)
		_, err = s.Invoker.CancelRun(t.Context(), journal.ForTenant(s.APIPool, "other"), n.ID, who)
		require.ErrorIs(t, err, journal.ErrNotFound, "another tenant's run")
	})

	t.Run("SendEventStartsTheRunsItTriggers", func(t *testing.T) {
		t.Parallel()
		ev, created, err := s.Invoker.SendEvent(t.Context(), db, journal.NewEvent{
			Tenant: tenant, ID: "signup-" + uuid.NewString(), Name: "user.signup", Data: json.RawMessage(`{}`), Identity: who})
		require.NoError(t, err)
		require.True(t, created)
		require.Len(t, ev.Runs, 1)
		require.JSONEq(t, `"welcomed"`, string(await(t, ev.Runs[0]).Output))

		dup, created, err := s.Invoker.SendEvent(t.Context(), db, journal.NewEvent{
			Tenant: tenant, ID: ev.ID, Name: "user.signup", Data: json.RawMessage(`{}`), Identity: who})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, ev.Runs, dup.Runs, "a repeated id starts nothing")
	})

	t.Run("PutScheduleChecksTheFunction", func(t *testing.T) {
		t.Parallel()
		put := func(function string) error {
			cron, err := invoker.ParseCron("@every 1h", "UTC")
			require.NoError(t, err)
			_, err = s.Invoker.Schedules().Put(t.Context(), db, schedule.NewSchedule{
				ID: uuid.NewString(), Tenant: tenant, Name: "s-" + function, Function: function, Cron: "@every 1h",
				Timezone: "UTC", Input: json.RawMessage(`null`), Identity: who, Next: cron.Next,
			})
			return err
		}
		require.ErrorIs(t, put("nope"), journal.ErrNotFound)
		require.ErrorIs(t, put("billing-only"), journal.ErrForbidden, "its runs would act as a developer")
		require.NoError(t, put("greet"))
	})

	t.Run("AwaitRunAnswersWhereTheRunStands", func(t *testing.T) {
		t.Parallel()
		n := newRun("greet", `{}`)
		_, _, err := journal.CreateRun(t.Context(), db, n) // no job: it stays queued
		require.NoError(t, err)
		run, err := s.Invoker.AwaitRun(t.Context(), db, n.ID, nil, time.Now())
		require.NoError(t, err)
		require.Equal(t, journal.StatusQueued, run.Status, "the deadline passed")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		run, err = s.Invoker.AwaitRun(ctx, db, n.ID, nil, time.Now().Add(time.Hour))
		require.NoError(t, err, "a caller that left gets the status, not an error")
		require.Equal(t, journal.StatusQueued, run.Status)
		_, err = s.Invoker.AwaitRun(t.Context(), journal.ForTenant(s.APIPool, "other"), n.ID, nil, time.Now())
		require.ErrorIs(t, err, journal.ErrNotFound)
	})
}
