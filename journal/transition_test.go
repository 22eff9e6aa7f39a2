package journal_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

func TestAppendEntry(t *testing.T) {
	t.Parallel()

	t.Run("IdenticalRepeatIsANoOp", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		started := dbNow(t, tx).Add(-time.Second)
		first := step(1, "charge", `{"id":"ch_1","amount":500}`)
		first.StartedAt = &started
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, first, journal.Bounds{}))
		retry := step(1, "charge", `{ "amount" : 500, "id" : "ch_1" }`)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, retry, journal.Bounds{}), "same entry, other spacing and key order: a retry")

		failed := journal.Entry{Seq: 2, Kind: journal.KindStep, Name: "ship", Attempt: 3,
			Error: &journal.ErrorInfo{Type: "carrier", Message: "no trucks"}}
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, failed, journal.Bounds{}))
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, failed, journal.Bounds{}))
		empty := step(3, "noop", "")
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, empty, journal.Bounds{}))
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, empty, journal.Bounds{}))

		es := mustEntries(t, tx, run.ID)
		require.Len(t, es, 3)
		require.Equal(t, "charge", es[0].Name)
		require.JSONEq(t, string(first.Output), string(es[0].Output))
		require.Equal(t, 1, es[0].Attempt, "attempt defaults to 1")
		require.Equal(t, started, *es[0].StartedAt)
		require.Equal(t, dbNow(t, tx), es[0].FinishedAt, "finished by the database clock")
		require.Equal(t, failed.Error, es[1].Error)
		require.Equal(t, 3, es[1].Attempt)
		require.Nil(t, es[2].Output)
	})

	t.Run("ADifferentEntryConflicts", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "charge", `1`), journal.Bounds{}))

		err := journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "refund", `1`), journal.Bounds{})
		require.ErrorIs(t, err, journal.ErrConflict)
		require.ErrorContains(t, err, `"charge"`)
		require.ErrorContains(t, err, `"refund"`)
		for _, other := range []journal.Entry{
			step(1, "charge", `2`),
			step(1, "charge", ""),
			{Seq: 1, Kind: journal.KindSleep, Name: "charge"},
			{Seq: 1, Kind: journal.KindStep, Name: "charge", Error: &journal.ErrorInfo{Type: "x", Message: "boom"}},
		} {
			require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, 1, other, journal.Bounds{}), journal.ErrConflict, "%+v", other)
		}
		es := mustEntries(t, tx, run.ID)
		require.Len(t, es, 1)
		require.JSONEq(t, `1`, string(es[0].Output), "the first write wins")
	})

	t.Run("AnotherInvocationIsSuperseded", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		for _, inv := range []int{0, 2} {
			require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, inv, step(1, "a", `1`), journal.Bounds{}), journal.ErrSuperseded)
		}
		require.Empty(t, mustEntries(t, tx, run.ID))

		require.ErrorIs(t, journal.AppendEntry(ctx, tx, newID(), 1, step(1, "a", `1`), journal.Bounds{}), journal.ErrSuperseded, "no such run")
	})

	t.Run("ARunNotRunningIsSuperseded", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		queued := mustCreateRun(t, tx)
		require.ErrorIs(t, journal.AppendEntry(ctx, tx, queued.ID, 0, step(1, "a", `1`), journal.Bounds{}), journal.ErrSuperseded)

		for _, status := range []journal.Status{journal.StatusQueued, journal.StatusSuspended, journal.StatusCompleted, journal.StatusFailed} {
			run := mustCreateRun(t, tx, claimed)
			require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `1`), journal.Bounds{}))
			_, err := journal.Finish(ctx, tx, run.ID, 1, outcomeWith(status))
			require.NoError(t, err)
			require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(2, "b", `2`), journal.Bounds{}), journal.ErrSuperseded, status)
			require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `1`), journal.Bounds{}), journal.ErrSuperseded,
				"%s: even an identical repeat", status)
			require.Len(t, mustEntries(t, tx, run.ID), 1)
		}
	})
}

func TestClaimRun(t *testing.T) {
	t.Parallel()

	t.Run("QueuedClaimsOnce", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		c, err := journal.ClaimRun(ctx, tx, run.ID, 90*time.Second)
		require.NoError(t, err)
		require.Equal(t, journal.StatusRunning, c.Run.Status)
		require.Equal(t, 1, c.Run.Invocation)
		require.Equal(t, 1, c.Run.Invocations)
		require.Equal(t, dbNow(t, tx), c.Now)
		require.Equal(t, c.Now.Add(90*time.Second), *c.Run.LeaseUntil)
		require.Equal(t, c.Now, *c.Run.StartedAt)
		require.Empty(t, c.Journal)
		require.Nil(t, c.StepAttempts)

		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "it is running")
		_, err = journal.ClaimRun(ctx, tx, newID(), time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "no such run")
	})

	t.Run("ConcurrentClaimsOneWins", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		run := mustCreateRun(t, db)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				<-start
				_, errs[i] = journal.ClaimRun(ctx, db, run.ID, time.Minute)
			})
		}
		close(start)
		wg.Wait()
		require.ElementsMatch(t, []error{nil, journal.ErrNotDue}, errs)
		got := mustGetRun(t, db, run)
		require.Equal(t, 1, got.Invocation, "claimed once")
		require.Equal(t, 1, got.Invocations)
	})

	t.Run("ReclaimBumpsInvocationAndLoadsJournal", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "reserve", `true`), journal.Bounds{}))
		fail := func(inv, seq, attempt int) {
			_, err := journal.Finish(ctx, tx, run.ID, inv, journal.RetryingStep(journal.StepRetry{
				Failure: journal.Failure{Seq: seq, Attempt: attempt, Name: "charge", Error: journal.ErrorInfo{Type: "card", Message: "declined"}}}))
			require.NoError(t, err)
		}
		fail(1, 2, 1) // After 0: due at once

		c, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		require.Equal(t, 2, c.Run.Invocation)
		require.Equal(t, 2, c.Run.Invocations)
		require.Nil(t, c.Run.WakeAt)
		require.Len(t, c.Journal, 1)
		require.Equal(t, "reserve", c.Journal[0].Name)
		require.Equal(t, map[int]int{2: 2}, c.StepAttempts, "step 2 failed once: the next attempt is its second")

		fail(2, 2, 2)
		c, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		require.Equal(t, 3, c.Run.Invocation)
		require.Equal(t, map[int]int{2: 3}, c.StepAttempts)

		ok := step(2, "charge", `"ch_1"`)
		ok.Attempt = 3
		_, err = journal.Finish(ctx, tx, run.ID, 3, withSteps(journal.RetryingInvocation(journal.ErrorInfo{Type: "timeout", Message: "slow"}, 0), ok))
		require.NoError(t, err)
		c, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		require.Equal(t, 4, c.Run.Invocation)
		require.Equal(t, 4, c.Run.Invocations)
		require.Equal(t, 1, c.Run.FailedInvocations)
		require.Equal(t, 1, c.Run.FailedInARow)
		require.Len(t, c.Journal, 2)
		require.Equal(t, 3, c.Journal[1].Attempt)
		require.Nil(t, c.StepAttempts, "step 2 is journaled, and a failed invocation (seq 0) is no step")
		require.Len(t, mustFailures(t, tx, run.ID), 3)
	})

	t.Run("SuspendedIsDueAtItsWakeTime", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: time.Hour}))
		require.NoError(t, err)
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "it sleeps for an hour")

		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID) // the hour passes
		c, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err, "due once its wake time has come")
		require.Equal(t, 2, c.Run.Invocation)
		require.Len(t, c.Journal, 1)
		require.Equal(t, journal.KindSleep, c.Journal[0].Kind)
		require.Equal(t, *f.WakeAt, *c.Journal[0].WakeAt)
	})

	t.Run("QueuedIsDueAfterItsBackoff", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		_, err := journal.Finish(ctx, tx, run.ID, 1, journal.RetryingInvocation(journal.ErrorInfo{Type: "http_status", Message: "500"}, time.Minute))
		require.NoError(t, err)
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue)
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() - interval '1 ms' WHERE id = $1`, run.ID)
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
	})

	t.Run("FinishedIsNeverDue", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		for _, status := range []journal.Status{journal.StatusCompleted, journal.StatusFailed} {
			run := mustCreateRun(t, tx, claimed)
			_, err := journal.Finish(ctx, tx, run.ID, 1, terminal(status))
			require.NoError(t, err)
			_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
			require.ErrorIs(t, err, journal.ErrNotDue, status)
		}
	})
}

func TestFinish(t *testing.T) {
	t.Parallel()

	t.Run("TerminalOutcomesAreFinal", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		for _, o := range []journal.Outcome{
			journal.Completed(json.RawMessage(`{"ok":true}`), step(1, "a", `1`), step(2, "b", `2`)),
			journal.Failed(journal.ErrorInfo{Type: "card", Message: "declined"}),
		} {
			run := mustCreateRun(t, tx, claimed)
			f, err := journal.Finish(ctx, tx, run.ID, 1, o)
			require.NoError(t, err)
			require.Equal(t, o.Status(), f.Status)
			require.Nil(t, f.WakeAt)
			require.False(t, f.Clock.Before(dbNow(t, tx)), "the wall clock, not the transaction's start")

			got := mustGetRun(t, tx, run)
			require.Equal(t, o.Status(), got.Status)
			require.True(t, got.Status.Terminal())
			require.Equal(t, dbNow(t, tx), *got.FinishedAt)
			require.Nil(t, got.LeaseUntil)
			require.Nil(t, got.WakeAt)
			require.Equal(t, o.Error(), got.Error)
			if o.Output() != nil {
				require.JSONEq(t, string(o.Output()), string(got.Output))
			} else {
				require.Nil(t, got.Output)
			}
			require.Len(t, mustEntries(t, tx, run.ID), len(o.Steps), "its unjournaled steps are journaled")

			_, err = journal.Finish(ctx, tx, run.ID, 1, journal.Completed(json.RawMessage(`2`)))
			require.ErrorIs(t, err, journal.ErrSuperseded, "%s: a second outcome", o.Status())
			_, err = journal.CancelRun(ctx, tx, run.Tenant, run.ID, journal.Identity{Subject: "late"})
			require.ErrorIs(t, err, journal.ErrFinished)
			require.Equal(t, got, mustGetRun(t, tx, run), "%s: nothing changes a finished run", o.Status())
		}
	})

	t.Run("SleepUsesTheDatabaseClock", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 3, Name: "cool-off", For: 90 * time.Second},
			step(1, "reserve", `1`), step(2, "charge", `2`)))
		require.NoError(t, err)
		require.Equal(t, journal.StatusSuspended, f.Status)
		now := dbNow(t, tx)
		require.False(t, f.Clock.Before(now))
		require.Equal(t, now.Add(90*time.Second), *f.WakeAt, "the wake time is the database's")

		got := mustGetRun(t, tx, run)
		require.Equal(t, journal.StatusSuspended, got.Status)
		require.Equal(t, *f.WakeAt, *got.WakeAt)
		require.Nil(t, got.LeaseUntil)
		require.Nil(t, got.FinishedAt)
		es := mustEntries(t, tx, run.ID)
		require.Len(t, es, 3)
		require.Equal(t, journal.KindSleep, es[2].Kind)
		require.Equal(t, "cool-off", es[2].Name)
		require.Equal(t, *f.WakeAt, *es[2].WakeAt, "the sleep's absolute wake time is journaled")

		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "asleep")
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID) // the 90s pass
		c, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)

		// A sleep with an absolute wake time keeps it.
		until := now.Add(time.Hour).Truncate(time.Microsecond)
		f, err = journal.Finish(ctx, tx, run.ID, c.Run.Invocation, journal.Sleeping(journal.Sleep{Seq: 4, Name: "until", Until: &until, For: time.Second}))
		require.NoError(t, err)
		require.True(t, until.Equal(*f.WakeAt), "%s != %s", until, f.WakeAt)

		// The seq of a sleep is journaled once.
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID)
		c, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		err = inSavepoint(t, tx, func(sp pgx.Tx) error {
			_, err := journal.Finish(ctx, sp, run.ID, c.Run.Invocation, journal.Sleeping(journal.Sleep{Seq: 2, Name: "again", For: time.Second}))
			return err
		})
		require.ErrorIs(t, err, journal.ErrConflict)
	})

	t.Run("FailedInvocationIsQueuedAndRecorded", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		e := &journal.ErrorInfo{Type: "timeout", Message: "did not answer", Retryable: true}
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.RetryingInvocation(*e, 2*time.Second))
		require.NoError(t, err)
		require.Equal(t, journal.StatusQueued, f.Status)
		require.Equal(t, dbNow(t, tx).Add(2*time.Second), *f.WakeAt)
		got := mustGetRun(t, tx, run)
		require.Equal(t, journal.StatusQueued, got.Status)
		require.Equal(t, 1, got.FailedInvocations)
		require.Nil(t, got.LeaseUntil)
		require.Nil(t, got.FinishedAt)
		fs := mustFailures(t, tx, run.ID)
		require.Len(t, fs, 1)
		require.Equal(t, 0, fs[0].Seq, "seq 0: the whole invocation")
		require.Equal(t, 1, fs[0].Attempt)
		require.Equal(t, *e, fs[0].Error)

		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID)
		c, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		_, err = journal.Finish(ctx, tx, run.ID, c.Run.Invocation, journal.RetryingInvocation(*e, 0))
		require.NoError(t, err)
		require.Equal(t, 2, mustGetRun(t, tx, run).FailedInARow, "failures in a row add up")
		fs = mustFailures(t, tx, run.ID)
		require.Len(t, fs, 2)
		require.Equal(t, 2, fs[1].Attempt)

		c, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute) // after 0: due at once
		require.NoError(t, err)
		_, err = journal.Finish(ctx, tx, run.ID, c.Run.Invocation, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: time.Second}))
		require.NoError(t, err)
		got = mustGetRun(t, tx, run)
		require.Zero(t, got.FailedInARow, "progress resets the count in a row")
		require.Equal(t, 2, got.FailedInvocations, "not the lifetime count")
		require.Equal(t, 3, got.Invocations)

		// A failure that ends the run counts; one that fails it before calling is not
		// an invocation.
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID)
		c, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		_, err = journal.Finish(ctx, tx, run.ID, c.Run.Invocation, journal.InvocationFailed(journal.ErrorInfo{Type: "bad_answer", Message: "no"}))
		require.NoError(t, err)
		got = mustGetRun(t, tx, run)
		require.Equal(t, 3, got.FailedInvocations)
		require.Equal(t, 4, got.Invocations)

		other := mustCreateRun(t, tx, claimed)
		_, err = journal.Finish(ctx, tx, other.ID, 1, journal.FailedBeforeCall(journal.ErrorInfo{Type: "max_recoveries", Message: "no"}))
		require.NoError(t, err)
		got = mustGetRun(t, tx, other)
		require.Zero(t, got.Invocations, "the claim called nothing")
		require.Zero(t, got.FailedInvocations)
	})

	t.Run("SupersededChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		before := mustGetRun(t, tx, run)
		for _, o := range []journal.Outcome{
			journal.Completed(json.RawMessage(`1`), step(1, "a", `1`)),
			journal.Completed(json.RawMessage(`1`)),
			journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: time.Second}),
			journal.RetryingStep(journal.StepRetry{Failure: journal.Failure{Seq: 1, Attempt: 1, Name: "a", Error: journal.ErrorInfo{Type: "t", Message: "m"}}}),
			journal.RetryingInvocation(journal.ErrorInfo{Type: "t", Message: "m"}, 0),
		} {
			_, err := journal.Finish(ctx, tx, run.ID, 2, o)
			require.ErrorIs(t, err, journal.ErrSuperseded, o.Status())
		}
		require.Equal(t, before, mustGetRun(t, tx, run))
		require.Empty(t, mustEntries(t, tx, run.ID))
		require.Empty(t, mustFailures(t, tx, run.ID))

		// An invocation whose lease was reaped and whose run was claimed again is stale.
		mustExec(t, tx, `UPDATE stepgate.run SET lease_until = now() - interval '1 s' WHERE id = $1`, run.ID)
		ids, err := journal.ReapExpiredLeases(ctx, tx, 1000)
		require.NoError(t, err)
		require.Contains(t, ids, run.ID)
		_, err = journal.Finish(ctx, tx, run.ID, 1, journal.Completed(json.RawMessage(`1`)))
		require.ErrorIs(t, err, journal.ErrSuperseded, "its run was requeued")
		c, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		_, err = journal.Finish(ctx, tx, run.ID, 1, journal.Completed(json.RawMessage(`1`)))
		require.ErrorIs(t, err, journal.ErrSuperseded, "another invocation owns its run")
		_, err = journal.Finish(ctx, tx, run.ID, c.Run.Invocation, journal.Completed(json.RawMessage(`2`)))
		require.NoError(t, err)
		require.JSONEq(t, `2`, string(mustGetRun(t, tx, run).Output))
	})
}

// TestNotify checks that the terminal update of a run a waiter attached to notifies
// NotifyChannel, and of a run nobody attached to does not.
func TestNotify(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	listener, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN "+journal.NotifyChannel)
	require.NoError(t, err)
	// The listener is closed, not returned to the pool, as it still listens.
	defer listener.Conn().Close(context.WithoutCancel(ctx))

	finish := func(run *journal.Run, inv int, o journal.Outcome) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, err := journal.Finish(ctx, tx, run.ID, inv, o)
			return err
		}))
	}
	completed := journal.Completed(json.RawMessage(`1`))

	// Nobody attached: no notification, even when the outcome itself asks (the
	// finishing process tells its own waiters).
	alone := mustCreateRun(t, db, claimed)
	finish(alone, 1, notifying(journal.Completed(json.RawMessage(`1`))))

	// A waiter attached from another request.
	attached := mustCreateRun(t, db, claimed)
	got, err := journal.Attach(ctx, db, attached.Tenant, attached.ID)
	require.NoError(t, err)
	require.Equal(t, journal.StatusRunning, got.Status)
	_, err = journal.Attach(ctx, db, newTenant(), attached.ID)
	require.ErrorIs(t, err, journal.ErrNotFound, "only the run's tenant attaches")
	finish(attached, 1, completed)

	// The starter waits: its invocation suspended with Notify, a later one completes.
	waited := mustCreateRun(t, db, claimed)
	finish(waited, 1, notifying(journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap"})))
	c, err := journal.ClaimRun(ctx, db, waited.ID, time.Minute)
	require.NoError(t, err)
	finish(waited, c.Run.Invocation, completed)

	// A failure of an attached run notifies too.
	failed := mustCreateRun(t, db, claimed)
	_, err = journal.Attach(ctx, db, failed.Tenant, failed.ID)
	require.NoError(t, err)
	finish(failed, 1, journal.Failed(journal.ErrorInfo{Type: "attempts_exhausted", Message: "gave up"}))

	// Notifications arrive in commit order, so the first being attached's proves that
	// alone's committed update sent none.
	for _, want := range []string{attached.ID, waited.ID, failed.ID} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, journal.NotifyChannel, n.Channel)
		require.Equal(t, want, n.Payload)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = listener.Conn().WaitForNotification(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no other notification")
}

func TestReapExpiredLeases(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	expired := mustCreateRun(t, tx, claimed)
	live := mustCreateRun(t, tx, claimed)
	expire := func(id string) {
		mustExec(t, tx, `UPDATE stepgate.run SET lease_until = now() - interval '1 ms' WHERE id = $1`, id)
	}
	expire(expired.ID)

	ids, err := journal.ReapExpiredLeases(ctx, tx, 1000)
	require.NoError(t, err)
	require.Contains(t, ids, expired.ID)
	require.NotContains(t, ids, live.ID)

	got := mustGetRun(t, tx, expired)
	require.Equal(t, journal.StatusQueued, got.Status)
	require.Nil(t, got.LeaseUntil)
	require.Nil(t, got.WakeAt, "due at once")
	require.Equal(t, 0, got.FailedInvocations, "a recovery is not a failed invocation")
	require.Equal(t, 0, got.FailedInARow)
	require.Equal(t, 1, got.Recoveries)
	require.Equal(t, 1, got.RecoveriesInARow)
	require.Equal(t, 1, got.Invocation, "the claim that comes next fences the old invocation out")
	require.Empty(t, mustFailures(t, tx, expired.ID), "nor a failed attempt")
	require.Equal(t, live, mustGetRun(t, tx, live), "a live lease is untouched")

	ids, err = journal.ReapExpiredLeases(ctx, tx, 1000)
	require.NoError(t, err)
	require.NotContains(t, ids, expired.ID, "a requeued run is reaped once")
	require.ErrorIs(t, journal.AppendEntry(ctx, tx, expired.ID, 1, step(1, "a", `1`), journal.Bounds{}), journal.ErrSuperseded)
	c, err := journal.ClaimRun(ctx, tx, expired.ID, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, c.Run.Invocation)
	require.Equal(t, 2, c.Run.Invocations)
	require.Equal(t, 1, c.Run.RecoveriesInARow)

	// Recovered again with no new entry: the count goes on.
	expire(expired.ID)
	_, err = journal.ReapExpiredLeases(ctx, tx, 1000)
	require.NoError(t, err)
	require.Equal(t, 2, mustGetRun(t, tx, expired).RecoveriesInARow)

	// A checkpoint lands between two recoveries: the count starts afresh.
	c, err = journal.ClaimRun(ctx, tx, expired.ID, time.Minute)
	require.NoError(t, err)
	require.NoError(t, journal.AppendEntry(ctx, tx, expired.ID, c.Run.Invocation, step(1, "a", `1`), journal.Bounds{}))
	expire(expired.ID)
	_, err = journal.ReapExpiredLeases(ctx, tx, 1000)
	require.NoError(t, err)
	got = mustGetRun(t, tx, expired)
	require.Equal(t, 1, got.RecoveriesInARow, "the journal grew since the last recovery")
	require.Equal(t, 3, got.Recoveries, "the lifetime count goes on")

	// An applied answer (a suspension) resets it.
	c, err = journal.ClaimRun(ctx, tx, expired.ID, time.Minute)
	require.NoError(t, err)
	_, err = journal.Finish(ctx, tx, expired.ID, c.Run.Invocation, journal.Sleeping(journal.Sleep{Seq: 2, Name: "nap", For: time.Hour}))
	require.NoError(t, err)
	got = mustGetRun(t, tx, expired)
	require.Equal(t, 0, got.RecoveriesInARow)
	require.Equal(t, 3, got.Recoveries, "the lifetime count is never reset")
}

func TestRenewAndReleaseLeases(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	a := mustCreateRun(t, tx, claimed)
	b := mustCreateRun(t, tx, claimed)
	done := mustCreateRun(t, tx, claimed)
	_, err := journal.Finish(ctx, tx, done.ID, 1, journal.Completed(json.RawMessage(`1`)))
	require.NoError(t, err)
	mustExec(t, tx, `UPDATE stepgate.run SET lease_until = now() - interval '1 s' WHERE id = $1`, a.ID)

	leases := []journal.Lease{{RunID: a.ID, Invocation: 1}, {RunID: b.ID, Invocation: 2}, {RunID: done.ID, Invocation: 1}}
	kept, err := journal.RenewLeases(ctx, tx, leases, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []journal.Lease{{RunID: a.ID, Invocation: 1}}, kept,
		"a lapsed lease not yet reaped is renewed; another invocation's and a finished run's are lost")
	var until time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT lease_until FROM stepgate.run WHERE id = $1`, a.ID).Scan(&until))
	require.True(t, until.After(time.Now().Add(50*time.Minute)), "renewed for the TTL: %s", until)
	kept, err = journal.RenewLeases(ctx, tx, nil, time.Hour)
	require.NoError(t, err)
	require.Empty(t, kept)

	ids, err := journal.ReleaseLeases(ctx, tx, []journal.Lease{{RunID: a.ID, Invocation: 1}, {RunID: b.ID, Invocation: 2}, {RunID: done.ID, Invocation: 1}})
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, ids, "only a lease its invocation still holds is released")
	got := mustGetRun(t, tx, a)
	require.Equal(t, journal.StatusQueued, got.Status)
	require.Nil(t, got.LeaseUntil)
	require.Equal(t, 1, got.Recoveries)
	require.Equal(t, 1, got.RecoveriesInARow)
	require.Equal(t, journal.StatusRunning, mustGetRun(t, tx, b).Status)
}

func TestAppendEntryBounds(t *testing.T) {
	t.Parallel()

	t.Run("NoGaps", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		err := journal.AppendEntry(ctx, tx, run.ID, 1, step(2, "b", `1`), journal.Bounds{})
		require.ErrorIs(t, err, journal.ErrGap)
		require.ErrorContains(t, err, "seq 2 is not the journal's next (seq 1 is not journaled)")
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `1`), journal.Bounds{}))
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(2, "b", `1`), journal.Bounds{}))
		require.Len(t, mustEntries(t, tx, run.ID), 2)
	})

	t.Run("Limits", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		b := journal.Bounds{MaxEntries: 3, MaxEntryBytes: 10, MaxJournalBytes: 21}
		var le *journal.LimitError
		err := journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `"0123456789"`), b)
		require.ErrorAs(t, err, &le)
		require.ErrorContains(t, err, "entry 1 holds 12 bytes, more than the limit of 10")
		for i, out := range []string{`"12345678"`, `"12345678"`} {
			require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(i+1, "s", out), b))
		}
		err = journal.AppendEntry(ctx, tx, run.ID, 1, step(3, "s", `"1234"`), b)
		require.ErrorIs(t, err, journal.ErrLimit)
		require.ErrorContains(t, err, "the journal would hold 26 bytes with entry 3, more than its limit of 21 bytes")
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(3, "s", `1`), b), "the bytes are counted, not guessed")
		err = journal.AppendEntry(ctx, tx, run.ID, 1, step(4, "s", `1`), b)
		require.ErrorIs(t, err, journal.ErrLimit)
		require.ErrorContains(t, err, "entry 4 is past the journal's limit of 3 entries")
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(3, "s", `1`), b), "a repeat past the bounds is still a harmless retry")
	})

	t.Run("ConflictsNameWhatDiffers", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "charge", `{"amount": 5}`), journal.Bounds{}))
		failed := step(1, "charge", "")
		failed.Error = &journal.ErrorInfo{Type: "declined", Message: "no funds"}
		for _, tc := range []struct {
			e    journal.Entry
			want string
		}{
			{step(1, "refund", `1`), `seq 1 holds step "charge", not step "refund"`},
			{step(1, "charge", `{"amount":6}`), `seq 1 holds step "charge" with output {"amount":5}, not output {"amount":6}`},
			{failed, `seq 1 holds step "charge" with output {"amount":5}, not with error declined "no funds"`},
		} {
			err := journal.AppendEntry(ctx, tx, run.ID, 1, tc.e, journal.Bounds{})
			require.ErrorIs(t, err, journal.ErrConflict)
			require.ErrorContains(t, err, tc.want)
		}
	})
}

// TestPendingSleepDelaysRetries: a sleep journaled while its invocation waits it out in
// its process (a checkpointed sleep) is not cut short when that invocation fails or its
// gateway dies: the failed invocation's retry, and the run requeued by the lease reaper,
// are due at the sleep's end, not before.
func TestPendingSleepDelaysRetries(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	sleeping := func() (*journal.Run, time.Time) {
		run := mustCreateRun(t, tx, claimed)
		until := time.Now().Add(time.Hour).Truncate(time.Microsecond).UTC()
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, journal.Entry{Seq: 1, Kind: journal.KindSleep, Name: "nap", WakeAt: &until}, journal.Bounds{}))
		return run, until
	}

	failed, until := sleeping()
	f, err := journal.Finish(ctx, tx, failed.ID, 1, journal.RetryingInvocation(journal.ErrorInfo{Type: "t", Message: "died"}, time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, until, f.WakeAt.UTC().Truncate(time.Microsecond), "the retry waits for the sleep's end")

	reaped, until := sleeping()
	mustExec(t, tx, `UPDATE stepgate.run SET lease_until = now() - interval '1 ms' WHERE id = $1`, reaped.ID)
	_, err = journal.ReapExpiredLeases(ctx, tx, 1000)
	require.NoError(t, err)
	got := mustGetRun(t, tx, reaped)
	require.Equal(t, journal.StatusQueued, got.Status)
	require.NotNil(t, got.WakeAt, "not due before the sleep's end")
	require.Equal(t, until, got.WakeAt.UTC())

	// A sleep that has ended delays nothing.
	past := mustCreateRun(t, tx, claimed)
	over := time.Now().Add(-time.Minute)
	require.NoError(t, journal.AppendEntry(ctx, tx, past.ID, 1, journal.Entry{Seq: 1, Kind: journal.KindSleep, Name: "nap", WakeAt: &over}, journal.Bounds{}))
	mustExec(t, tx, `UPDATE stepgate.run SET lease_until = now() - interval '1 ms' WHERE id = $1`, past.ID)
	_, err = journal.ReapExpiredLeases(ctx, tx, 1000)
	require.NoError(t, err)
	require.Nil(t, mustGetRun(t, tx, past).WakeAt, "due at once")
}

func TestClaimRunEarly(t *testing.T) {
	t.Parallel()
	const early = 40 * time.Millisecond

	t.Run("ASleepEndingWithinTheBoundIsClaimedBeforeItEnds", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: 10 * time.Millisecond}))
		require.NoError(t, err)
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "ClaimRun waits for the wake time")

		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, f.WakeAt.Add(time.Millisecond), early, time.Minute, 0)
		require.ErrorIs(t, err, journal.ErrNotDue, "another wake time: another suspension")
		_, err = journal.ClaimRunEarly(ctx, tx, "another-tenant", run.ID, *f.WakeAt, early, time.Minute, 0)
		require.ErrorIs(t, err, journal.ErrNotDue, "another tenant's run")
		c, err := journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, *f.WakeAt, early, time.Minute, 0)
		require.NoError(t, err)
		require.Equal(t, journal.StatusRunning, c.Run.Status)
		require.Equal(t, 2, c.Run.Invocation)
		require.Nil(t, c.Run.WakeAt)
		require.Nil(t, c.Run.Awaiting)
		require.Equal(t, *f.WakeAt, c.NotBefore, "its invocation waits for the wake time")
		require.True(t, c.Now.Before(c.NotBefore), "claimed before the sleep ends")
		require.Len(t, c.Journal, 1)
		require.Equal(t, journal.KindSleep, c.Journal[0].Kind)

		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, *f.WakeAt, early, time.Minute, 0)
		require.ErrorIs(t, err, journal.ErrNotDue, "claimed once")
		clock, err := journal.ClockNow(ctx, tx)
		require.NoError(t, err)
		require.False(t, clock.Before(c.Now), "the clock, not the transaction's start")
	})

	t.Run("AClaimMadeDeletesTheSleepsBackstopJobNoWorkerHas", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		job := func(runID, state string) (id int64) {
			require.NoError(t, tx.QueryRow(ctx, `
				INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at)
				VALUES (jsonb_build_object('run_id', $1::text), 'stepgate.invoke', 25, 1, 'default', $2::river_job_state, now() + interval '1 hour')
				RETURNING id`, runID, state).Scan(&id))
			return id
		}
		exists := func(id int64) (ok bool) {
			require.NoError(t, tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job WHERE id = $1)`, id).Scan(&ok))
			return ok
		}
		sleep := func() (*journal.Run, time.Time) {
			run := mustCreateRun(t, tx, claimed)
			f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: 10 * time.Millisecond}))
			require.NoError(t, err)
			return run, *f.WakeAt
		}

		run, wakeAt := sleep()
		backstop := job(run.ID, "scheduled")
		_, err := journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, wakeAt.Add(time.Millisecond), early, time.Minute, backstop)
		require.ErrorIs(t, err, journal.ErrNotDue)
		require.True(t, exists(backstop), "no claim, the job stays")
		other, _ := sleep()
		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, wakeAt, early, time.Minute, job(other.ID, "scheduled"))
		require.NoError(t, err)
		require.True(t, exists(backstop), "another run's job is never deleted")
		_, err = tx.Exec(ctx, `DELETE FROM river_job WHERE id <> $1`, backstop)
		require.NoError(t, err)

		run, wakeAt = sleep()
		backstop = job(run.ID, "scheduled")
		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, wakeAt, early, time.Minute, backstop)
		require.NoError(t, err)
		require.False(t, exists(backstop), "the claim deleted the backstop")

		run, wakeAt = sleep()
		working := job(run.ID, "running")
		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, wakeAt, early, time.Minute, working)
		require.NoError(t, err)
		require.True(t, exists(working), "a job a worker has is left to the worker")
	})

	t.Run("HandedOverBeforeItsEndItWaitsForIt", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: 30 * time.Millisecond}))
		require.NoError(t, err)
		c, err := journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, *f.WakeAt, early, time.Minute, 0)
		require.NoError(t, err)
		// The gateway stops before the sleep's end and hands the run over.
		ids, err := journal.ReleaseLeases(ctx, tx, []journal.Lease{{RunID: run.ID, Invocation: c.Run.Invocation}})
		require.NoError(t, err)
		require.Equal(t, []string{run.ID}, ids)
		got := mustGetRun(t, tx, run)
		require.Equal(t, journal.StatusQueued, got.Status)
		require.NotNil(t, got.WakeAt)
		require.True(t, got.WakeAt.Equal(*f.WakeAt), "queued until the sleep's end")
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "no gateway invokes it before the sleep's end")
	})

	t.Run("ASleepEndingPastTheBoundIsNot", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Sleeping(journal.Sleep{Seq: 1, Name: "nap", For: time.Hour}))
		require.NoError(t, err)
		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, *f.WakeAt, early, time.Minute, 0)
		require.ErrorIs(t, err, journal.ErrNotDue)
		require.Equal(t, journal.StatusSuspended, mustGetRun(t, tx, run).Status)
	})

	t.Run("AWaitThatMayEndEarlierIsNot", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.WaitingForEvent(journal.WaitEvent{
			Seq: 1, Name: "wait", Event: "orders.paid", Match: map[string]json.RawMessage{}, Timeout: 10 * time.Millisecond}))
		require.NoError(t, err)
		require.NotNil(t, f.WakeAt)
		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, *f.WakeAt, early, time.Minute, 0)
		require.ErrorIs(t, err, journal.ErrNotDue, "an event may resume it before its timeout: its timeout is not claimed early")
		require.Equal(t, journal.StatusSuspended, mustGetRun(t, tx, run).Status)
	})

	t.Run("AQueuedRunIsNot", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.RetryingInvocation(journal.ErrorInfo{Type: "http_status", Message: "500"}, 10*time.Millisecond))
		require.NoError(t, err)
		_, err = journal.ClaimRunEarly(ctx, tx, run.Tenant, run.ID, *f.WakeAt, early, time.Minute, 0)
		require.ErrorIs(t, err, journal.ErrNotDue)
	})
}
