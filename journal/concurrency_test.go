package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestClaimRunSlots: concurrent claims of runs of a limited function take exactly the
// limit's slots (the counter re-checked under its row lock), the others are held, and
// the slots come back when runs leave running, in the same statement, waking the oldest
// held runs (SlotChannel).
func TestClaimRunSlots(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentClaimsTakeTheLimit", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant := newTenant()
		mustRegisterWith(t, db, tenant, "limited", `{"concurrency":[{"limit":3},{"limit":2,"key":"input.c"}]}`)
		var runs []*journal.Run
		for i := range 24 {
			input := `{"c":"a"}`
			if i%2 == 1 {
				input = `{"c":"b"}`
			}
			runs = append(runs, mustCreateRunOf(t, db, tenant, "limited", func(n *journal.NewRun) {
				n.Input = json.RawMessage(input)
				n.Claim = true // a limited function's run is created queued all the same
			}))
		}
		require.Equal(t, journal.StatusQueued, runs[0].Status)
		require.Equal(t, []string{"", "input.c=a"}, slotKeys(t, db, runs[0].ID))

		errs := make([]error, len(runs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, r := range runs {
			wg.Go(func() {
				<-start
				_, errs[i] = journal.ClaimRunSlots(ctx, db, r.ID, time.Minute)
			})
		}
		close(start)
		wg.Wait()
		claimed := 0
		for _, err := range errs {
			if err == nil {
				claimed++
				continue
			}
			var held *journal.HeldError
			require.True(t, errors.As(err, &held), "%v", err)
		}
		require.Equal(t, 3, claimed, "exactly the function-wide limit")
		var running, counted int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND status = 'running'`, tenant).Scan(&running))
		require.NoError(t, db.QueryRow(ctx, `SELECT running FROM stepgate.concurrency_slot WHERE tenant = $1 AND key = ''`, tenant).Scan(&counted))
		require.Equal(t, 3, running)
		require.Equal(t, 3, counted, "the counter is the running runs")

		// Every running run ends: the counters go back to nothing, and held runs are
		// woken, oldest first, as many as the slots freed.
		conn, err := db.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(ctx, "LISTEN "+journal.SlotChannel)
		require.NoError(t, err)
		mustExec(t, db, `UPDATE stepgate.run SET status = 'completed', lease_until = NULL, finished_at = now()
			WHERE tenant = $1 AND status = 'running'`, tenant)
		woken := map[string]bool{}
		for len(woken) < 3 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := conn.Conn().WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			woken[n.Payload] = true
		}
		var due int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND held_on = '' AND wake_at <= now()`, tenant).Scan(&due))
		require.Equal(t, 3, due, "as many woken in the function-wide line as slots freed")
		var left int
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(sum(running), 0) FROM stepgate.concurrency_slot WHERE tenant = $1`, tenant).Scan(&left))
		require.Zero(t, left)
	})

	t.Run("NoLimitNoSlots", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		require.Equal(t, journal.StatusRunning, run.Status, "created claimed: the hot path is unchanged")
		require.Nil(t, slotKeys(t, tx, run.ID))
		queued := mustCreateRun(t, tx)
		c, err := journal.ClaimRunSlots(ctx, tx, queued.ID, time.Minute)
		require.NoError(t, err, "a run with no slot keys is claimed as by ClaimRun")
		require.Equal(t, journal.StatusRunning, c.Run.Status)
	})

	t.Run("LongValuesAreHashed", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		tenant := newTenant()
		mustRegisterWith(t, tx, tenant, "keyed", `{"concurrency":[{"limit":1,"key":"identity.subject"},{"limit":1,"key":"input.x.y"}]}`)
		long := make([]byte, 300)
		for i := range long {
			long[i] = 'z'
		}
		run := mustCreateRunOf(t, tx, tenant, "keyed", func(n *journal.NewRun) {
			n.Input = json.RawMessage(`{"x":{"y":"` + string(long) + `"}}`)
		})
		keys := slotKeys(t, tx, run.ID)
		require.Equal(t, "identity.subject=tester", keys[0])
		require.Regexp(t, `^input\.x\.y=md5:[0-9a-f]{32}$`, keys[1])
	})
}

func slotKeys(t *testing.T, db journal.DB, runID string) []string {
	t.Helper()
	var keys []string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT slot_keys FROM stepgate.run WHERE id = $1`, runID).Scan(&keys))
	return keys
}
