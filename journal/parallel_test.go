package journal_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// journalBytes returns each entry's running byte total, by seq.
func journalBytes(t *testing.T, db journal.DB, runID string) map[int]int64 {
	t.Helper()
	rows, _ := db.Query(t.Context(), `SELECT seq, journal_bytes FROM stepgate.journal_entry WHERE run_id = $1`, runID)
	out := map[int]int64{}
	for rows.Next() {
		var seq int
		var b int64
		require.NoError(t, rows.Scan(&seq, &b))
		out[seq] = b
	}
	require.NoError(t, rows.Err())
	return out
}

// TestParallelEntries: entries of steps run in parallel are journaled out of order
// within their window, and the running byte totals stay exact, even when the holes are
// filled concurrently.
func TestParallelEntries(t *testing.T) {
	t.Parallel()

	t.Run("WindowsAndHoles", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		b := journal.Bounds{MaxJournalBytes: 12}
		withWindow := func(e journal.Entry, w int) journal.Entry { e.Window = w; return e }
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "a", `1`), b))
		require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(3, "c", `333`), b), journal.ErrGap)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(3, "c", `333`), 2), b))
		err := journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(6, "f", `6`), 2), b)
		require.ErrorIs(t, err, journal.ErrGap)
		require.Contains(t, err.Error(), "seq 6 is past its window of 2 (no seq from 4 to 5 is journaled)")
		require.ErrorIs(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(4, "d", `4`), 65), b), journal.ErrGap)
		require.Equal(t, map[int]int64{1: 1, 3: 4}, journalBytes(t, tx, run.ID))

		// A fill without a window is refused: it would leave the totals above it short.
		err = journal.AppendEntry(ctx, tx, run.ID, 1, step(2, "b", `22`), b)
		require.ErrorIs(t, err, journal.ErrGap)
		require.Contains(t, err.Error(), "seq 2 fills a hole below later entries")
		// The hole at 2 filled: the entry above it counts its bytes.
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(2, "b", `22`), 2), b))
		require.Equal(t, map[int]int64{1: 1, 2: 3, 3: 6}, journalBytes(t, tx, run.ID))
		// A repeat is harmless and counts nothing twice.
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(2, "b", `22`), 2), b))
		require.Equal(t, map[int]int64{1: 1, 2: 3, 3: 6}, journalBytes(t, tx, run.ID))

		// The limit (12 bytes) holds across a hole: a fill is checked against the total
		// above it, not only below.
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(5, "e", `55555`), 2), b)) // 6 + 5 = 11
		var le *journal.LimitError
		require.ErrorAs(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(4, "d", `44`), 2), b), &le)
		require.Contains(t, le.Message, "13 bytes")
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, withWindow(step(4, "d", `4`), 2), b))
		require.Equal(t, map[int]int64{1: 1, 2: 3, 3: 6, 4: 7, 5: 12}, journalBytes(t, tx, run.ID))
	})

	t.Run("ConcurrentFillsCountExactly", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		for round := range 5 {
			run := mustCreateRun(t, db, claimed)
			require.NoError(t, journal.AppendEntry(ctx, db, run.ID, 1, step(1, "first", `1`), journal.Bounds{}))
			var wg sync.WaitGroup
			errs := make([]error, 8)
			start := make(chan struct{})
			want := int64(1)
			for i := range 8 {
				out := strings.Repeat("7", i+1)
				want += int64(len(out))
				wg.Go(func() {
					<-start
					e := step(i+2, fmt.Sprintf("p%d", i), out)
					e.Window = i + 2
					errs[i] = journal.AppendEntry(ctx, db, run.ID, 1, e, journal.Bounds{})
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "round %d entry %d", round, i)
			}
			got := journalBytes(t, db, run.ID)
			require.Len(t, got, 9)
			require.Equal(t, want, got[9], "round %d: the last entry's total is every entry's bytes", round)
		}
	})

	t.Run("InvokeAllWakesOnceAllChildrenEnded", func(t *testing.T) {
		t.Parallel()
		ctx, db, tenant := t.Context(), pgtest.DB(t), newTenant()
		mustRegister(t, db, tenant, "child")
		for round := range 5 {
			mustRegister(t, db, tenant, "parent")
			parent := mustCreateRunOf(t, db, tenant, "parent", claimed)
			var f *journal.Finished
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) (err error) {
				calls := []journal.Invoke{
					{ChildID: newID(), Function: "child", Input: json.RawMessage(`1`)},
					{ChildID: newID(), Function: "child", Input: json.RawMessage(`2`)},
					{ChildID: newID(), Function: "nobody"},
					{ChildID: newID(), Function: "child", Input: json.RawMessage(`4`)},
				}
				f, err = journal.Finish(ctx, tx, parent.ID, 1, journal.InvokingChildren(journal.InvokeAll{Seq: 1, Name: "all", Calls: calls}))
				return err
			})
			require.NoError(t, err)
			require.Len(t, f.Children, 3)
			require.Nil(t, f.WakeAt)
			got := mustGetRun(t, db, parent)
			require.Equal(t, journal.AwaitInvokeAll, got.Awaiting.Kind)
			require.Equal(t, 4, got.Awaiting.Count)
			require.Len(t, mustEntries(t, db, parent.ID), 1, "the call that could not start is journaled at once")

			// The children end at once, in three transactions.
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, child := range f.Children {
				wg.Go(func() {
					<-start
					finishChild(t, db, child, journal.Completed(child.Input))
				})
			}
			close(start)
			wg.Wait()
			got = mustGetRun(t, db, parent)
			require.NotNil(t, got.WakeAt, "round %d: the last child's end made the parent due", round)
			es := mustEntries(t, db, parent.ID)
			require.Len(t, es, 4)
			for i, e := range es {
				require.Equal(t, i+1, e.Seq)
				require.Equal(t, "all", e.Name)
			}
			require.JSONEq(t, `2`, string(es[1].Output))
			require.Equal(t, journal.ErrorTypeNotFound, es[2].Error.Type)
			bytes := journalBytes(t, db, parent.ID)
			var sum int64
			require.NoError(t, db.QueryRow(ctx, `SELECT sum(octet_length(coalesce(output, error)::text)) FROM stepgate.journal_entry WHERE run_id = $1`,
				parent.ID).Scan(&sum))
			require.Equal(t, sum, bytes[4], "round %d: the totals count every child's outcome", round)
		}
	})
}
