package journal_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// insertJob inserts a River invoke job with args and state, as River would, and
// returns its id.
func insertJob(t *testing.T, db journal.DB, args, state string, priority int) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(t.Context(), `
		INSERT INTO river_job (kind, args, state, priority, queue, max_attempts)
		VALUES ('`+journal.InvokeJobKind+`', $1, $2, $3, 'default', 25) RETURNING id`, args, state, priority).Scan(&id))
	return id
}

func jobOf(t *testing.T, db journal.DB, id int64) (priority int, tenant string) {
	t.Helper()
	require.NoError(t, db.QueryRow(t.Context(), `SELECT priority, coalesce(args->>'tenant', '') FROM river_job WHERE id = $1`, id).Scan(&priority, &tenant))
	return priority, tenant
}

func TestRunPriority(t *testing.T) {
	t.Parallel()

	t.Run("StartFunctionDefault", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "plain")
		mustRegisterWith(t, tx, tenant, "batch", `{"priority":4}`)
		require.Equal(t, journal.DefaultPriority, mustCreateRunOf(t, tx, tenant, "plain").Priority)
		require.Equal(t, 4, mustCreateRunOf(t, tx, tenant, "batch").Priority, "the function's")
		urgent := mustCreateRunOf(t, tx, tenant, "batch", func(n *journal.NewRun) { n.Priority = 1 })
		require.Equal(t, 1, urgent.Priority, "the start's overrides the function's")
		got, err := journal.GetRun(ctx, tx, tenant, urgent.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Priority)
		_, _, err = journal.CreateRun(ctx, tx, journal.NewRun{ID: newID(), Tenant: tenant, Function: "plain", Input: []byte(`{}`),
			Identity: journal.Identity{Subject: "s", Tenant: tenant, Roles: []string{"admin"}}, Priority: 5})
		require.Error(t, err, "the column's check refuses what the gateway would have")
	})

	t.Run("JobsAreLeftAsInserted", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "batch", `{"priority":3}`)
		run := mustCreateRunOf(t, tx, tenant, "batch")
		// No trigger fills in what a job naming only its run leaves out: the invoker
		// sets both (see RunJobs).
		p, got := jobOf(t, tx, insertJob(t, tx, `{"run_id":"`+run.ID+`"}`, "available", 1))
		require.Equal(t, 1, p)
		require.Empty(t, got)
	})

	t.Run("RunJobs", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "batch", `{"priority":3}`)
		batch := mustCreateRunOf(t, tx, tenant, "batch")
		urgent := mustCreateRunOf(t, tx, tenant, "batch", func(n *journal.NewRun) { n.Priority = 1 })
		jobs, now, err := journal.RunJobs(ctx, tx, []string{batch.ID, urgent.ID, newID()})
		require.NoError(t, err)
		require.False(t, now.IsZero(), "the database clock")
		require.ElementsMatch(t, []journal.RunJob{
			{RunID: batch.ID, Tenant: tenant, Priority: 3},
			{RunID: urgent.ID, Tenant: tenant, Priority: 1},
		}, jobs, "a run not found is left out")
		jobs, _, err = journal.RunJobs(ctx, tx, nil)
		require.NoError(t, err)
		require.Empty(t, jobs)
	})

	t.Run("HoldBack", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		job := insertJob(t, tx, `{"run_id":"`+run.ID+`","tenant":"`+run.Tenant+`"}`, "running", 1)
		require.NoError(t, journal.HoldBack(ctx, tx, job, run.ID, journal.MaxPriority, "waiting for a worker"))
		p, _ := jobOf(t, tx, job)
		require.Equal(t, journal.MaxPriority, p)
		held := mustGetRun(t, tx, run).Held
		require.NotNil(t, held)
		require.Equal(t, "waiting for a worker", *held)

		// A job no longer running is River's: its priority is not changed, nor raised.
		other := insertJob(t, tx, `{"run_id":"`+run.ID+`","tenant":"`+run.Tenant+`"}`, "available", 1)
		require.NoError(t, journal.HoldBack(ctx, tx, other, run.ID, journal.MaxPriority, "waiting for a worker"))
		p, _ = jobOf(t, tx, other)
		require.Equal(t, 1, p)
		low := insertJob(t, tx, `{"run_id":"`+run.ID+`","tenant":"`+run.Tenant+`"}`, "running", 4)
		require.NoError(t, journal.HoldBack(ctx, tx, low, run.ID, 3, "waiting for a worker"))
		p, _ = jobOf(t, tx, low)
		require.Equal(t, 4, p, "never raised")

		// A run that started is not held.
		started := mustCreateRun(t, tx, claimed)
		require.NoError(t, journal.HoldBack(ctx, tx, job, started.ID, journal.MaxPriority, "waiting for a worker"))
		require.Nil(t, mustGetRun(t, tx, started).Held)
	})
}
