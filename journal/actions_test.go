package journal_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
	"github.com/stepgate/stepgate/journal/runevents"
	"github.com/stepgate/stepgate/journal/stats"
)

func TestCancelRun(t *testing.T) {
	t.Parallel()

	t.Run("QueuedRunIsCancelledNamingWhoCancelled", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		got, err := journal.CancelRun(ctx, tx, run.Tenant, run.ID, journal.Identity{Subject: "ada"})
		require.NoError(t, err)
		require.Equal(t, journal.StatusCancelled, got.Status)
		require.Equal(t, &journal.ErrorInfo{Type: "cancelled", Message: "cancelled by ada"}, got.Error)
		require.NotNil(t, got.FinishedAt)
		require.Nil(t, got.WakeAt)
		require.Equal(t, got, mustGetRun(t, tx, run))
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "its River job finds nothing to claim")
	})

	t.Run("FinishedRunIsErrFinished", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		_, err := journal.Finish(ctx, tx, run.ID, 1, journal.Completed(json.RawMessage(`1`)))
		require.NoError(t, err)
		got, err := journal.CancelRun(ctx, tx, run.Tenant, run.ID, journal.Identity{Subject: "ada"})
		require.ErrorIs(t, err, journal.ErrFinished)
		require.Equal(t, journal.StatusCompleted, got.Status, "the run as it is")
		cancelled := mustCreateRun(t, tx)
		_, err = journal.CancelRun(ctx, tx, cancelled.Tenant, cancelled.ID, journal.Identity{Subject: "ada"})
		require.NoError(t, err)
		_, err = journal.CancelRun(ctx, tx, cancelled.Tenant, cancelled.ID, journal.Identity{Subject: "bob"})
		require.ErrorIs(t, err, journal.ErrFinished, "cancelled once")
		require.Equal(t, "cancelled by ada", mustGetRun(t, tx, cancelled).Error.Message)
	})

	t.Run("OtherTenantsAndUnknownRunsAreNotFound", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		_, err := journal.CancelRun(ctx, tx, newTenant(), run.ID, journal.Identity{Subject: "mallory"})
		require.ErrorIs(t, err, journal.ErrNotFound)
		_, err = journal.CancelRun(ctx, tx, run.Tenant, newID(), journal.Identity{Subject: "ada"})
		require.ErrorIs(t, err, journal.ErrNotFound)
		require.Equal(t, journal.StatusQueued, mustGetRun(t, tx, run).Status)
	})

	t.Run("RunningInvocationIsFencedOut", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `1`), journal.Bounds{}))
		got, err := journal.CancelRun(ctx, tx, run.Tenant, run.ID, journal.Identity{Subject: "ada"})
		require.NoError(t, err)
		require.Nil(t, got.LeaseUntil)
		require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(2, "b", `2`), journal.Bounds{}), journal.ErrSuperseded)
		_, err = journal.Finish(ctx, tx, run.ID, 1, journal.Completed(json.RawMessage(`1`)))
		require.ErrorIs(t, err, journal.ErrSuperseded)
		require.Len(t, mustEntries(t, tx, run.ID), 1, "what was journaled stays")
	})

	t.Run("SuspendedRunDueNowIsNotClaimed", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		_, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap"}))
		require.NoError(t, err)
		_, err = journal.CancelRun(ctx, tx, run.Tenant, run.ID, journal.Identity{Subject: "ada"})
		require.NoError(t, err)
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue)
	})
}

func TestRerunOf(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	old := mustCreateRun(t, tx)
	run := mustCreateRunOf(t, tx, old.Tenant, "fn", func(n *journal.NewRun) { n.RerunOf = &old.ID })
	require.Equal(t, &old.ID, run.RerunOf)
	require.Equal(t, run, mustGetRun(t, tx, run))
	require.Nil(t, old.RerunOf)
}

// listen returns a connection of db listening on channel, closed when the test ends.
func listen(t *testing.T, db *pgxpool.Pool, channel string) *pgx.Conn {
	t.Helper()
	c, err := db.Acquire(t.Context())
	require.NoError(t, err)
	conn := c.Hijack() // it listens: never back to the pool
	t.Cleanup(func() { conn.Close(context.WithoutCancel(t.Context())) })
	_, err = conn.Exec(t.Context(), "LISTEN "+channel)
	require.NoError(t, err)
	return conn
}

// nextEvent returns the next notification on conn.
func nextEvent(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	return n.Payload
}

func TestRunEvents(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	conn := listen(t, db, runevents.EventChannel)
	marker := func() {
		t.Helper()
		mustExec(t, db, `SELECT pg_notify($1, 'marker')`, runevents.EventChannel)
	}
	expect := func(run *journal.Run, status journal.Status, invocations int) runevents.RunEvent {
		t.Helper()
		payload := nextEvent(t, conn)
		ev, err := runevents.ParseRunEvent(payload)
		require.NoError(t, err, payload)
		require.Equal(t, run.ID, ev.ID, payload)
		require.Equal(t, run.Tenant, ev.Tenant)
		require.Equal(t, run.Function, ev.Function)
		require.Equal(t, status, ev.Status, payload)
		require.Equal(t, invocations, ev.Invocations, payload)
		return ev
	}
	finish := func(run *journal.Run, inv int, o journal.Outcome) {
		t.Helper()
		_, err := journal.Finish(ctx, db, run.ID, inv, o)
		require.NoError(t, err)
	}

	// Nobody watches: a whole run's life sends nothing; the marker comes first.
	tenant := newTenant()
	mustRegister(t, db, tenant, "fn")
	alone := mustCreateRunOf(t, db, tenant, "fn")
	c, err := journal.ClaimRun(ctx, db, alone.ID, time.Minute)
	require.NoError(t, err)
	finish(alone, c.Run.Invocation, journal.Completed(json.RawMessage(`1`)))
	marker()
	require.Equal(t, "marker", nextEvent(t, conn))

	// Watched: every status change, in order.
	require.NoError(t, runevents.Watch(ctx, db, "gw-1", []string{tenant}, time.Minute))
	run := mustCreateRunOf(t, db, tenant, "fn")
	expect(run, journal.StatusQueued, 0)
	c, err = journal.ClaimRun(ctx, db, run.ID, time.Minute)
	require.NoError(t, err)
	expect(run, journal.StatusRunning, 1)
	finish(run, c.Run.Invocation, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap"}))
	ev := expect(run, journal.StatusSuspended, 1)
	require.NotNil(t, ev.WakeAt)
	c, err = journal.ClaimRun(ctx, db, run.ID, time.Minute)
	require.NoError(t, err)
	expect(run, journal.StatusRunning, 2)
	finish(run, c.Run.Invocation, journal.Completed(json.RawMessage(`1`)))
	ev = expect(run, journal.StatusCompleted, 2)
	require.NotNil(t, ev.FinishedAt)

	claimedRun := mustCreateRunOf(t, db, tenant, "fn", claimed)
	expect(claimedRun, journal.StatusRunning, 1)
	_, err = journal.CancelRun(ctx, db, tenant, claimedRun.ID, journal.Identity{Subject: "ada"})
	require.NoError(t, err)
	expect(claimedRun, journal.StatusCancelled, 1)

	failed := mustCreateRunOf(t, db, tenant, "fn", claimed)
	expect(failed, journal.StatusRunning, 1)
	_, err = journal.Finish(ctx, db, failed.ID, 1, journal.Failed(journal.ErrorInfo{Type: "x", Message: "y"}))
	require.NoError(t, err)
	expect(failed, journal.StatusFailed, 1)

	reaped := mustCreateRunOf(t, db, tenant, "fn", claimed)
	expect(reaped, journal.StatusRunning, 1)
	mustExec(t, db, `UPDATE stepgate.run SET lease_until = now() - interval '1 second' WHERE id = $1`, reaped.ID)
	ids, err := journal.ReapExpiredLeases(ctx, db, 10)
	require.NoError(t, err)
	require.Contains(t, ids, reaped.ID)
	expect(reaped, journal.StatusQueued, 1)

	// Another tenant's runs stay silent; so do the tenant's once unwatched, and once
	// the watch expired (a gateway that died).
	other := newTenant()
	mustRegister(t, db, other, "fn")
	mustCreateRunOf(t, db, other, "fn")
	require.NoError(t, runevents.Unwatch(ctx, db, "gw-1", tenant))
	mustCreateRunOf(t, db, tenant, "fn")
	require.NoError(t, runevents.Watch(ctx, db, "gw-2", []string{tenant}, -time.Second))
	mustCreateRunOf(t, db, tenant, "fn")
	marker()
	require.Equal(t, "marker", nextEvent(t, conn))
}

func TestRunsByID(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	a, b := mustCreateRun(t, tx), mustCreateRun(t, tx)
	runs, err := journal.RunsByID(ctx, tx, []string{a.ID, b.ID, newID()})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a.ID, b.ID}, []string{runs[0].ID, runs[1].ID})
	require.Len(t, runs, 2)
}

func TestStatsOfFunctions(t *testing.T) {
	t.Parallel()
	ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
	for _, name := range []string{"a", "b", "idle"} {
		mustRegister(t, tx, tenant, name)
	}
	// finishAfter makes a run of fn that took d from creation to its outcome.
	finishAfter := func(fn string, d time.Duration, o journal.Outcome) {
		t.Helper()
		run := mustCreateRunOf(t, tx, tenant, fn, claimed)
		mustExec(t, tx, `UPDATE stepgate.run SET created_at = now() - make_interval(secs => $2) WHERE id = $1`, run.ID, d.Seconds())
		_, err := journal.Finish(ctx, tx, run.ID, 1, o)
		require.NoError(t, err)
	}
	ok := journal.Completed(json.RawMessage(`1`))
	bad := journal.Failed(journal.ErrorInfo{Type: "x", Message: "y"})
	finishAfter("a", 10*time.Second, ok)
	finishAfter("a", 20*time.Second, ok)
	finishAfter("a", 40*time.Second, bad)
	cancelled := mustCreateRunOf(t, tx, tenant, "a")
	_, err := journal.CancelRun(ctx, tx, tenant, cancelled.ID, journal.Identity{Subject: "ada"})
	require.NoError(t, err)
	mustCreateRunOf(t, tx, tenant, "a") // queued
	old := mustCreateRunOf(t, tx, tenant, "b")
	mustExec(t, tx, `UPDATE stepgate.run SET created_at = now() - interval '2 hours' WHERE id = $1`, old.ID)
	mustCreateRun(t, tx) // another tenant's

	got, err := stats.StatsOfFunctions(ctx, tx, tenant, time.Hour)
	require.NoError(t, err)
	require.Len(t, got, 3)
	a, b, idle := got[0], got[1], got[2]
	require.Equal(t, "a", a.Name)
	require.Equal(t, 5, a.Runs)
	require.Equal(t, 2, a.Completed)
	require.Equal(t, 2, a.Failed, "failed or cancelled")
	require.Equal(t, 1, a.Running)
	require.NotNil(t, a.P50MS)
	require.InDelta(t, 20000, *a.P50MS, 1, "the median of 10s, 20s and 40s; cancelled runs do not count")
	require.Equal(t, dbNow(t, tx), *a.LastRunAt)

	require.Equal(t, "b", b.Name)
	require.Zero(t, b.Runs, "its run is older than the window")
	require.Nil(t, b.P50MS)
	require.NotNil(t, b.LastRunAt, "the last run, in the window or not")
	require.Equal(t, dbNow(t, tx).Add(-2*time.Hour), *b.LastRunAt)

	require.Equal(t, stats.FunctionStats{Name: "idle"}, idle)

	wide, err := stats.StatsOfFunctions(ctx, tx, tenant, 3*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, wide[1].Runs)
}

// TestActionQueriesNotifyNotifyChannel: the named queries that end a run spell out
// NotifyChannel, which a sqlc query cannot splice in.
func TestActionQueriesNotifyNotifyChannel(t *testing.T) {
	t.Parallel()
	for name, sql := range map[string]string{
		"ActionCancelRun":      dbsqlc.ActionCancelRun,
		"ActionExceedDeadline": dbsqlc.ActionExceedDeadline,
	} {
		require.Contains(t, sql, "pg_notify('"+journal.NotifyChannel+"', ", name)
	}
}

// TestRunActionsReadRunsAsGetRunDoes: RunsByID, ExceedDeadline's run not due and
// CancelRun return a run as GetRun reads it, whatever its columns hold: a wake_at of
// 'infinity' (a run held by a concurrency limit) is none, the JSON columns decode.
func TestRunActionsReadRunsAsGetRunDoes(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	later := time.Now().Add(time.Hour)
	held := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Deadline = &later })
	mustExec(t, tx, `UPDATE stepgate.run SET wake_at = 'infinity', held = 'a concurrency limit' WHERE id = $1`, held.ID)
	due := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Claim, n.Lease = true, time.Minute })
	mustExec(t, tx, `UPDATE stepgate.run SET status = 'suspended', lease_until = NULL, wake_at = now() + interval '1 minute',
		awaiting = '{"kind": "sleep", "seq": 3, "name": "nap"}', error = '{"type": "x", "message": "y"}' WHERE id = $1`, due.ID)
	cancelled := mustCreateRun(t, tx)
	ada := journal.Identity{Subject: "ada", Tenant: cancelled.Tenant, Roles: []string{"developer"}}
	got, err := journal.CancelRun(ctx, tx, cancelled.Tenant, cancelled.ID, ada)
	require.NoError(t, err)
	want, err := journal.GetRun(ctx, tx, cancelled.Tenant, cancelled.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, &ada, got.CancelledBy)

	runs, err := journal.RunsByID(ctx, tx, []string{held.ID, due.ID, cancelled.ID})
	require.NoError(t, err)
	require.Len(t, runs, 3)
	for _, r := range runs {
		want, err := journal.GetRun(ctx, tx, r.Tenant, r.ID)
		require.NoError(t, err)
		require.Equal(t, *want, r)
		switch r.ID {
		case held.ID:
			require.Nil(t, r.WakeAt, "'infinity' is none")
		case due.ID:
			require.NotNil(t, r.WakeAt)
			require.Equal(t, &journal.Awaiting{Kind: journal.AwaitSleep, Seq: 3, Name: "nap"}, r.Awaiting)
			require.Equal(t, &journal.ErrorInfo{Type: "x", Message: "y"}, r.Error)
		}
	}

	got, err = journal.ExceedDeadline(ctx, tx, held.ID)
	require.ErrorIs(t, err, journal.ErrNotDue)
	want, err = journal.GetRun(ctx, tx, held.Tenant, held.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Nil(t, got.WakeAt)
}
