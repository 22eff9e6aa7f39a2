package invoker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

// TestEveryInvokeJobCarriesItsRunsTenantAndPriority: each way a run gets a
// stepgate.invoke job (a start, an event's triggered run, a resumed waiter, a sleep's
// wake-up, a child's start, a parent woken by its child, a callback, a message, a rerun,
// a schedule's tick, a recovery) inserts it with its run's tenant in the args and its
// run's priority as the job's, set by the invoker: no trigger on river_job fills them in.
// The functions' priorities (3 and 4, and 2 by a start) are none of River's default (1).
func TestEveryInvokeJobCarriesItsRunsTenantAndPriority(t *testing.T) {
	t.Parallel()
	// Every job as inserted: a gateway's claim deletes a run's scheduled job no worker
	// has yet (journal.ClaimWokenRun).
	s := stack.Start(t, stack.Options{DatabaseURL: pgtest.DBURLKeepingJobs(t)})
	app := s.NewApp()
	functions.Register(app, "napper", func(ctx context.Context, _ struct{}) (string, error) {
		if err := step.Sleep(ctx, "nap", time.Millisecond); err != nil {
			return "", err
		}
		return "awake", nil
	}, functions.Priority(3))
	functions.Register(app, "triggered", func(ctx context.Context, _ json.RawMessage) (string, error) {
		return "triggered", nil
	}, functions.OnEvent("job.go"), functions.Priority(3))
	functions.Register(app, "waiter", func(ctx context.Context, _ struct{}) (string, error) {
		_, err := step.WaitForEvent[json.RawMessage](ctx, "wait", "job.resume", step.Timeout(time.Hour)).Get()
		return "resumed", err
	}, functions.Priority(3))
	functions.Register(app, "child", func(ctx context.Context, _ struct{}) (string, error) {
		return "child", nil
	}, functions.Priority(4))
	functions.Register(app, "parent", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Invoke[string](ctx, "call", "child", struct{}{}).Get()
	}, functions.Priority(3))
	functions.Register(app, "approver", func(ctx context.Context, _ struct{}) (string, error) {
		cb, err := step.Callback[json.RawMessage](ctx, "approve", step.Timeout(time.Hour))
		if err != nil {
			return "", err
		}
		_, err = cb.Result().Get()
		return "approved", err
	}, functions.Priority(3))
	functions.Register(app, "inbox", func(ctx context.Context, _ struct{}) (string, error) {
		_, err := step.Receive[json.RawMessage](ctx, "mail", step.Timeout(time.Hour)).Get()
		return "received", err
	}, functions.Priority(3))
	functions.Register(app, "ticked", func(ctx context.Context, _ json.RawMessage) (string, error) {
		return "ticked", nil
	}, functions.Priority(3))
	functions.Register(app, "recovered", func(ctx context.Context, _ struct{}) (string, error) {
		return "recovered", nil
	}, functions.Priority(4))
	s.Sync(t, s.ServeApp(t, app))

	ctx, tenant := t.Context(), auth.DefaultTenant
	db := journal.ForTenant(s.APIPool, tenant)
	who := access.Identity{Subject: "ada", Tenant: tenant, Roles: []string{"developer"}}
	newRun := func(function string) journal.NewRun {
		return journal.NewRun{ID: uuid.Must(uuid.NewV7()).String(), Tenant: tenant, Function: function, Input: []byte(`{}`), Identity: who}
	}
	start := func(n journal.NewRun) string {
		t.Helper()
		run, created, err := s.Invoker.StartRun(ctx, db, n)
		require.NoError(t, err)
		require.True(t, created)
		return run.ID
	}
	awaitStatus := func(id string, want journal.Status) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			got, err := journal.GetRun(context.Background(), db, tenant, id)
			if assert.NoError(ct, err) {
				assert.Equal(ct, want, got.Status)
			}
		}, 30*time.Second, 5*time.Millisecond, "run %s becomes %s", id, want)
	}
	jobs := func(id string) int {
		t.Helper()
		var n int
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM public.inserted_job WHERE kind = $1 AND args->>'run_id' = $2`,
			journal.InvokeJobKind, id).Scan(&n))
		return n
	}
	// want is, by path, the run that path enqueued and how many invoke jobs it has then.
	want := map[string]struct {
		run  string
		jobs int
	}{}

	// A start, with the start's own priority, and the run's wake-up after its sleep.
	napper := newRun("napper")
	napper.Priority = 2
	want["start, sleep's wake-up"] = struct {
		run  string
		jobs int
	}{start(napper), 2}
	awaitStatus(napper.ID, journal.StatusCompleted)

	// An event's triggered run.
	ev, _, err := s.Invoker.SendEvent(ctx, db, journal.NewEvent{Tenant: tenant, ID: uuid.NewString(), Name: "job.go", Data: []byte(`{}`), Identity: who})
	require.NoError(t, err)
	require.Len(t, ev.Runs, 1)
	want["event's run"] = struct {
		run  string
		jobs int
	}{ev.Runs[0], 1}

	// A waiter the event resumes.
	waiter := start(newRun("waiter"))
	awaitStatus(waiter, journal.StatusSuspended)
	ev, _, err = s.Invoker.SendEvent(ctx, db, journal.NewEvent{Tenant: tenant, ID: uuid.NewString(), Name: "job.resume", Data: []byte(`{}`), Identity: who})
	require.NoError(t, err)
	require.Equal(t, []string{waiter}, ev.Resumed)
	want["resumed waiter"] = struct {
		run  string
		jobs int
	}{waiter, 2}

	// A child's start, and its parent's wake-up by the child's end.
	parent := start(newRun("parent"))
	awaitStatus(parent, journal.StatusCompleted)
	var child string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT id::text FROM stepgate.run WHERE parent_id = $1`, parent).Scan(&child))
	want["child's start"] = struct {
		run  string
		jobs int
	}{child, 1}
	want["parent woken by its child"] = struct {
		run  string
		jobs int
	}{parent, 2}

	// A callback's resolution.
	approver := start(newRun("approver"))
	awaitStatus(approver, journal.StatusSuspended)
	_, err = s.Invoker.Callbacks().Resolve(ctx, db, invoker.CallbackRef{RunID: approver, Name: "approve"}, journal.Resolution{Data: []byte(`true`), By: &who})
	require.NoError(t, err)
	want["callback"] = struct {
		run  string
		jobs int
	}{approver, 2}

	// A message to a run waiting for it.
	inbox := start(newRun("inbox"))
	awaitStatus(inbox, journal.StatusSuspended)
	_, err = s.Invoker.Messages().Send(ctx, db, journal.NewMessage{Tenant: tenant, RunID: inbox, ID: "m1", Topic: "mail", Data: []byte(`1`), Identity: who})
	require.NoError(t, err)
	want["message"] = struct {
		run  string
		jobs int
	}{inbox, 2}

	// A rerun.
	rerun := newRun("napper")
	rerun.RerunOf = &napper.ID
	again, err := s.Invoker.RerunRun(ctx, db, rerun, 1)
	require.NoError(t, err)
	want["rerun"] = struct {
		run  string
		jobs int
	}{again.ID, 1}

	// A recovery: a queued run named by id only, as the reaper, the stranded-run sweep
	// and a stopping gateway's hand-over enqueue theirs.
	lost := newRun("recovered")
	_, _, err = journal.CreateRun(ctx, db, lost) // queued with no job
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return s.Invoker.Enqueue(ctx, tx, lost.ID) }))
	want["recovery"] = struct {
		run  string
		jobs int
	}{lost.ID, 1}

	// A schedule's tick.
	cron, err := invoker.ParseCron("@every 1s", "UTC")
	require.NoError(t, err)
	_, err = s.Invoker.Schedules().Put(ctx, db, schedule.NewSchedule{ID: uuid.NewString(), Tenant: tenant, Name: "every-second",
		Function: "ticked", Cron: "@every 1s", Timezone: "UTC", Input: []byte(`null`), Identity: who, Next: cron.Next})
	require.NoError(t, err)
	var ticked string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, s.Pool.QueryRow(ctx, `SELECT id::text FROM stepgate.run WHERE function = 'ticked' ORDER BY id LIMIT 1`).Scan(&ticked))
	}, 30*time.Second, 10*time.Millisecond, "a tick starts a run")
	want["schedule's tick"] = struct {
		run  string
		jobs int
	}{ticked, 1}

	for path, w := range want {
		require.GreaterOrEqual(t, jobs(w.run), w.jobs, "%s: run %s's invoke jobs", path, w.run)
	}

	// Every invoke job, of every path above, carries its run's tenant and priority, as
	// inserted (a job the fair share held back has its priority lowered to the last).
	type job struct {
		ID                       int64
		Function, RunID          string
		JobTenant, RunTenant     string
		JobPriority, RunPriority int
		HeldBack                 bool
	}
	rows, _ := s.Pool.Query(ctx, `
		SELECT j.id, r.function, j.args->>'run_id', coalesce(j.args->>'tenant', ''), r.tenant, j.priority, r.priority,
			coalesce((j.metadata->>'snoozes')::int, 0) > 0
		FROM public.inserted_job j JOIN stepgate.run r ON r.id::text = j.args->>'run_id'
		WHERE j.kind = $1 ORDER BY j.id`, journal.InvokeJobKind)
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[job])
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(all), 14)
	for _, j := range all {
		require.Equal(t, j.RunTenant, j.JobTenant, "job %d of run %s (%s): its args' tenant", j.ID, j.RunID, j.Function)
		if !j.HeldBack {
			require.Equal(t, j.RunPriority, j.JobPriority, "job %d of run %s (%s): its priority", j.ID, j.RunID, j.Function)
		}
	}
}
