package journal_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestFinishWithLastStep checks the one-round-trip finish of an answer that carries the
// function's last step: it applies what Finish applies, and when the step is refused,
// it changes nothing of the run, as Finish in a rolled-back transaction would.
func TestFinishWithLastStep(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t) // commits: the batch is its own implicit transaction

	// started returns a claimed run whose journal holds step 1 "a", journaled by its
	// invocation (1).
	started := func(t *testing.T) *journal.Run {
		run := mustCreateRun(t, db, claimed)
		require.NoError(t, journal.AppendEntry(t.Context(), db, run.ID, 1, step(1, "a", `1`), journal.Bounds{}))
		return run
	}
	// unchanged checks that run is still running, its invocation's, with its journal
	// as before.
	unchanged := func(t *testing.T, run *journal.Run, entries int) {
		t.Helper()
		got := mustGetRun(t, db, run)
		require.Equal(t, journal.StatusRunning, got.Status)
		require.NotNil(t, got.LeaseUntil)
		require.Len(t, mustEntries(t, db, run.ID), entries)
	}

	t.Run("CompletesWithTheStep", func(t *testing.T) {
		t.Parallel()
		run := started(t)
		f, err := journal.FinishWithLastStep(t.Context(), db, run.ID, 1, journal.Completed(json.RawMessage(`{"ok":true}`), step(2, "b", `2`)))
		require.NoError(t, err)
		require.Equal(t, journal.StatusCompleted, f.Status)
		require.Nil(t, f.WakeAt)
		require.Empty(t, f.Parent)
		got := mustGetRun(t, db, run)
		require.Equal(t, journal.StatusCompleted, got.Status)
		require.JSONEq(t, `{"ok":true}`, string(got.Output))
		require.NotNil(t, got.FinishedAt)
		require.Nil(t, got.LeaseUntil)
		es := mustEntries(t, db, run.ID)
		require.Len(t, es, 2)
		require.Equal(t, "b", es[1].Name)
		require.JSONEq(t, `2`, string(es[1].Output))

		_, err = journal.FinishWithLastStep(t.Context(), db, run.ID, 1, journal.Completed(json.RawMessage(`1`), step(3, "c", `3`)))
		require.ErrorIs(t, err, journal.ErrSuperseded, "a finished run takes no second answer")
		require.Len(t, mustEntries(t, db, run.ID), 2)
	})

	t.Run("OneRoundTrip", func(t *testing.T) {
		t.Parallel()
		var trips pgtest.RoundTrips
		cfg := db.Config().Copy()
		cfg.ConnConfig.Tracer = &trips
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		require.NoError(t, pool.Ping(t.Context())) // connect first
		run := started(t)
		trips.Reset()
		_, err = journal.FinishWithLastStep(t.Context(), pool, run.ID, 1, journal.Completed(json.RawMessage(`1`), step(2, "b", `2`)))
		require.NoError(t, err)
		require.Equal(t, int32(1), trips.Count(), "the step and the finish in one batch")
		require.Equal(t, journal.StatusCompleted, mustGetRun(t, db, run).Status)
	})

	t.Run("FailsWithTheStep", func(t *testing.T) {
		t.Parallel()
		run := started(t)
		e := journal.ErrorInfo{Type: "card", Message: "declined"}
		f, err := journal.FinishWithLastStep(t.Context(), db, run.ID, 1, journal.Failed(e, step(2, "b", `2`)))
		require.NoError(t, err)
		require.Equal(t, journal.StatusFailed, f.Status)
		require.Equal(t, &e, mustGetRun(t, db, run).Error)
		require.Len(t, mustEntries(t, db, run.ID), 2)
	})

	t.Run("ARefusedStepChangesNothing", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]struct {
			step   journal.Entry
			bounds journal.Bounds
			want   error
		}{
			"conflict":    {step: step(1, "other", `1`), want: journal.ErrConflict},
			"gap":         {step: step(3, "c", `3`), want: journal.ErrGap},
			"entry limit": {step: step(2, "b", `2`), bounds: journal.Bounds{MaxEntries: 1}, want: journal.ErrLimit},
			"entry bytes": {step: step(2, "b", `"0123456789"`), bounds: journal.Bounds{MaxEntryBytes: 4}, want: journal.ErrLimit},
		} {
			run := started(t)
			o := journal.Completed(json.RawMessage(`1`), c.step)
			o.Bounds = c.bounds
			_, err := journal.FinishWithLastStep(t.Context(), db, run.ID, 1, o)
			require.ErrorIs(t, err, c.want, name)
			unchanged(t, run, 1)
			es := mustEntries(t, db, run.ID)
			require.Equal(t, "a", es[0].Name, name)
		}
	})

	t.Run("AnotherInvocationIsSuperseded", func(t *testing.T) {
		t.Parallel()
		run := started(t)
		_, err := journal.FinishWithLastStep(t.Context(), db, run.ID, 2, journal.Completed(json.RawMessage(`1`), step(2, "b", `2`)))
		require.ErrorIs(t, err, journal.ErrSuperseded)
		unchanged(t, run, 1)
	})

	t.Run("AnIdenticalRepeatNeedsATransaction", func(t *testing.T) {
		t.Parallel()
		run := started(t)
		o := journal.Completed(json.RawMessage(`"done"`), step(1, "a", `1`))
		_, err := journal.FinishWithLastStep(t.Context(), db, run.ID, 1, o)
		require.ErrorIs(t, err, journal.ErrNeedsTransaction, "the step was there already: not the batch's")
		unchanged(t, run, 1)

		f, err := journal.Finish(t.Context(), db, run.ID, 1, o)
		require.NoError(t, err, "Finish takes the repeat")
		require.Equal(t, journal.StatusCompleted, f.Status)
	})

	t.Run("OtherOutcomesNeedATransaction", func(t *testing.T) {
		t.Parallel()
		run := started(t)
		windowed := step(2, "b", `2`)
		windowed.Window = 2
		for name, o := range map[string]journal.Outcome{
			"no step":   journal.Completed(json.RawMessage(`1`)),
			"two steps": journal.Completed(json.RawMessage(`1`), step(2, "b", `2`), step(3, "c", `3`)),
			"a window":  journal.Completed(json.RawMessage(`1`), windowed),
			"a sleep":   journal.Sleeping(journal.Sleep{Seq: 3, Name: "nap", For: 1}, step(2, "b", `2`)),
			"queued":    journal.RetryingInvocation(journal.ErrorInfo{Type: "t", Message: "m"}, 0),
		} {
			_, err := journal.FinishWithLastStep(t.Context(), db, run.ID, 1, o)
			require.ErrorIs(t, err, journal.ErrNeedsTransaction, name)
		}
		tx := pgtest.Tx(t)
		inTx := mustCreateRun(t, tx, claimed)
		_, err := journal.FinishWithLastStep(t.Context(), tx, inTx.ID, 1, journal.Completed(json.RawMessage(`1`), step(1, "a", `1`)))
		require.ErrorIs(t, err, journal.ErrNeedsTransaction, "in a transaction")
		unchanged(t, run, 1)
	})
}
