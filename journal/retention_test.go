package journal_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/retention"
)

// TestRetention deletes finished runs past their retention (their revision's, else the
// default), oldest first and in batches, with what hangs off them, and leaves a
// tombstone that only the run's tenant reads.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	tenant, other := newTenant(), newTenant()
	mustRegister(t, tx, tenant, "keep")
	_, err := journal.RegisterFunction(ctx, tx, tenant, "short", "http://127.0.0.1:1/short", json.RawMessage(`{"retention":"1h"}`), time.Minute, 0)
	require.NoError(t, err)
	const def = 30 * 24 * time.Hour

	// finished makes a run of function that finished ago.
	finished := func(function string, ago time.Duration) *journal.Run {
		run := mustCreateRunOf(t, tx, tenant, function, claimed)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `1`), journal.Bounds{}))
		mustExec(t, tx, `INSERT INTO stepgate.stream (tenant, run_id, key) VALUES ($1, $2, 'log')`, tenant, run.ID)
		mustExec(t, tx, `INSERT INTO stepgate.stream_chunk (tenant, run_id, key, pos, data, at_seq, at_attempt, at_index)
			VALUES ($1, $2, 'log', 0, '"hi"', 1, 1, 0)`, tenant, run.ID)
		mustExec(t, tx, `UPDATE stepgate.run SET status = 'completed', lease_until = NULL, finished_at = now() - $2 * interval '1 second'
			WHERE id = $1`, run.ID, ago.Seconds())
		return run
	}
	oldest := finished("keep", 60*24*time.Hour)
	old := finished("keep", 40*24*time.Hour)
	recent := finished("keep", 10*24*time.Hour)
	shortOld := finished("short", 2*time.Hour)
	shortNew := finished("short", 30*time.Minute)
	unfinished := mustCreateRunOf(t, tx, tenant, "keep")
	mustExec(t, tx, `UPDATE stepgate.run SET created_at = now() - interval '90 days' WHERE id = $1`, unfinished.ID)

	n, err := retention.DeleteExpiredRuns(ctx, tx, def, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "a batch")
	n, err = retention.DeleteExpiredRuns(ctx, tx, def, 2)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the rest: fewer than a batch")
	n, err = retention.DeleteExpiredRuns(ctx, tx, def, 2)
	require.NoError(t, err)
	require.Zero(t, n)

	for _, gone := range []*journal.Run{oldest, old, shortOld} {
		_, err := journal.GetRun(ctx, tx, tenant, gone.ID)
		require.ErrorIs(t, err, journal.ErrNotFound)
		var left int
		require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM stepgate.journal_entry WHERE run_id = $1)
			+ (SELECT count(*) FROM stepgate.stream WHERE run_id = $1) + (SELECT count(*) FROM stepgate.stream_chunk WHERE run_id = $1)`,
			gone.ID).Scan(&left))
		require.Zero(t, left, "its journal and streams went with it")
		ts, err := retention.RunTombstoneOf(ctx, tx, tenant, gone.ID)
		require.NoError(t, err)
		require.Equal(t, gone.Function, ts.Function)
		_, err = retention.RunTombstoneOf(ctx, tx, other, gone.ID)
		require.ErrorIs(t, err, journal.ErrNotFound, "another tenant learns nothing")
	}
	for _, kept := range []*journal.Run{recent, shortNew, unfinished} {
		_, err := journal.GetRun(ctx, tx, tenant, kept.ID)
		require.NoError(t, err, "kept: within its retention, or not finished")
	}
	_, err = retention.RunTombstoneOf(ctx, tx, tenant, recent.ID)
	require.ErrorIs(t, err, journal.ErrNotFound)
	_, err = retention.RunTombstoneOf(ctx, tx, tenant, "not-a-uuid")
	require.ErrorIs(t, err, journal.ErrNotFound)

	// Old events and tombstones go after the default retention.
	mustExec(t, tx, `INSERT INTO stepgate.event (tenant, id, name, data, identity, created_at) VALUES
		($1, 'old', 'e', '{}', '{}', now() - interval '31 days'), ($1, 'new', 'e', '{}', '{}', now())`, tenant)
	n, err = retention.DeleteExpiredEvents(ctx, tx, def, 10)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	var events []string
	rows, _ := tx.Query(ctx, `SELECT id FROM stepgate.event WHERE tenant = $1`, tenant)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		events = append(events, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"new"}, events)
	mustExec(t, tx, `UPDATE stepgate.run_tombstone SET deleted_at = now() - interval '31 days' WHERE id = $1`, oldest.ID)
	n, err = retention.DeleteExpiredTombstones(ctx, tx, def, 10)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	_, err = retention.RunTombstoneOf(ctx, tx, tenant, oldest.ID)
	require.ErrorIs(t, err, journal.ErrNotFound)
}
