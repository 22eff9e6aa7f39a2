package journal_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

func TestExceedDeadline(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Hour)
	later := time.Now().Add(time.Hour)

	t.Run("FailsARunPastItsDeadline", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		for _, opt := range []func(*journal.NewRun){
			func(n *journal.NewRun) { n.Deadline = &past },                    // queued
			func(n *journal.NewRun) { n.Deadline, n.StartAt = &past, &later }, // scheduled
			func(n *journal.NewRun) { n.Deadline, n.Claim = &past, true },     // running
		} {
			run := mustCreateRun(t, tx, opt)
			got, err := journal.ExceedDeadline(ctx, tx, run.ID)
			require.NoError(t, err)
			require.Equal(t, journal.StatusFailed, got.Status)
			require.Equal(t, journal.ErrorTypeDeadline, got.Error.Type)
			require.Equal(t, run.Invocation+1, got.Invocation, "its invocation is fenced out")
			require.Nil(t, got.WakeAt)
			require.NotNil(t, got.FinishedAt)
			// Once is enough.
			_, err = journal.ExceedDeadline(ctx, tx, run.ID)
			require.ErrorIs(t, err, journal.ErrFinished)
		}
	})

	t.Run("LeavesARunBeforeItsDeadline", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		for _, d := range []*time.Time{nil, &later} {
			run := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Deadline = d })
			got, err := journal.ExceedDeadline(ctx, tx, run.ID)
			require.ErrorIs(t, err, journal.ErrNotDue)
			require.Equal(t, journal.StatusQueued, got.Status)
		}
		_, err := journal.ExceedDeadline(ctx, tx, newID())
		require.ErrorIs(t, err, journal.ErrNotFound)
	})

	t.Run("TheEarliestDeadlineWins", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		_, err := journal.RegisterFunction(ctx, tx, tenant, "fn", "http://127.0.0.1:1/fn", nil, time.Minute, time.Minute)
		require.NoError(t, err)
		run := mustCreateRunOf(t, tx, tenant, "fn", func(n *journal.NewRun) { n.Deadline = &later })
		require.Equal(t, time.Minute, run.Deadline.Sub(run.CreatedAt), "the run_timeout is earlier")
		soon := run.CreatedAt.Add(time.Second)
		run = mustCreateRunOf(t, tx, tenant, "fn", func(n *journal.NewRun) { n.Deadline = &soon })
		require.True(t, soon.Equal(*run.Deadline))
		// A child inherits its parent's deadline when it is earlier.
		child := mustCreateRunOf(t, tx, tenant, "fn", func(n *journal.NewRun) {
			n.ParentID, n.ParentSeq, n.ParentName = &run.ID, 1, "child"
		})
		require.True(t, soon.Equal(*child.Deadline))
	})

	t.Run("AScheduledRunIsDueAtItsStart", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, func(n *journal.NewRun) { n.StartAt = &later })
		require.Equal(t, journal.StatusScheduled, run.Status)
		_, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue)
		run = mustCreateRun(t, tx, func(n *journal.NewRun) { n.StartAt = &past })
		claim, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		require.Equal(t, journal.StatusRunning, claim.Run.Status)
	})
}

// TestUpcomingDeadlines: the runs that have not ended whose deadline is near, or has
// passed (their timer was lost), earliest first; not those far off, ended or without one.
func TestUpcomingDeadlines(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	past, near, far := time.Now().Add(-time.Minute), time.Now().Add(time.Second), time.Now().Add(time.Hour)
	overdue := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Deadline = &past })
	ended := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Deadline = &past })
	_, err := journal.ExceedDeadline(ctx, tx, ended.ID)
	require.NoError(t, err)
	soon := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Deadline, n.Claim = &near, true })
	later := mustCreateRun(t, tx, func(n *journal.NewRun) { n.Deadline = &far })
	none := mustCreateRun(t, tx)
	mine := map[string]bool{overdue.ID: true, ended.ID: true, soon.ID: true, later.ID: true, none.ID: true}

	ids := func(after time.Time) []string {
		deadlines, now, err := journal.UpcomingDeadlines(ctx, tx, after, 10*time.Second, 10000)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), now, time.Minute, "the database clock")
		var ids []string
		for _, d := range deadlines {
			if mine[d.RunID] { // other tests' runs are there too
				ids = append(ids, d.RunID)
			}
		}
		return ids
	}
	require.Equal(t, []string{overdue.ID, soon.ID}, ids(time.Time{}))
	require.Equal(t, []string{soon.ID}, ids(*overdue.Deadline), "after the last one a full batch returned")
}
