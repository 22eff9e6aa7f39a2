package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
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

	t.Run("CreatedClaimedWhenThereIsRoom", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant := newTenant()
		mustRegisterWith(t, db, tenant, "limited", `{"concurrency":[{"limit":2,"key":"input.c"}]}`)
		create := func(c string, mod func(*journal.NewRun)) *journal.Run {
			return mustCreateRunOf(t, db, tenant, "limited", func(n *journal.NewRun) {
				n.Input, n.Claim, n.Lease = json.RawMessage(`{"c":"`+c+`"}`), true, time.Minute
				if mod != nil {
					mod(n)
				}
			})
		}
		a1, a2, a3, b1 := create("a", nil), create("a", nil), create("a", nil), create("b", nil)
		require.Equal(t, journal.StatusRunning, a1.Status, "taken in the INSERT: one statement")
		require.Equal(t, journal.StatusRunning, a2.Status)
		require.Equal(t, journal.StatusQueued, a3.Status, "no room: created queued, for ClaimRunSlots to hold")
		require.Equal(t, journal.StatusRunning, b1.Status, "another key has its own room")
		keyed := create("b", func(n *journal.NewRun) { n.IdempotencyKey = "k1" })
		require.Equal(t, journal.StatusQueued, keyed.Status, "a start with an idempotency key takes its slots when claimed")
		_, err := journal.ClaimRunSlots(ctx, db, a3.ID, time.Minute)
		var held *journal.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, map[string]int{"input.c=a": 2, "input.c=b": 1}, slotCounts(t, db, tenant))
	})

	t.Run("CountedKeyTakesExactlyItsLimit", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant := newTenant()
		// 100 >= 64: the key's running runs are counted (docs/concurrency.md), with 32
		// tickets: a claim that counts fewer than 68 needs no lock; then one at a time.
		mustRegisterWith(t, db, tenant, "wide", `{"concurrency":[{"limit":100}]}`)
		runs := make([]*journal.Run, 160)
		var wg sync.WaitGroup
		for i := range runs {
			wg.Go(func() {
				runs[i] = mustCreateRunOf(t, db, tenant, "wide", func(n *journal.NewRun) { n.Claim, n.Lease = true, time.Minute })
			})
		}
		wg.Wait()
		createdRunning := 0
		for _, r := range runs {
			if r.Status == journal.StatusRunning {
				createdRunning++
			}
		}
		require.LessOrEqual(t, createdRunning, 100)
		require.Positive(t, createdRunning, "far from the limit, runs are created running")
		// The rest are claimed, concurrently: exactly the limit runs in all.
		for _, r := range runs {
			if r.Status == journal.StatusQueued {
				wg.Go(func() {
					_, err := journal.ClaimRunSlots(ctx, db, r.ID, time.Minute)
					var held *journal.HeldError
					if err != nil && !errors.As(err, &held) {
						t.Errorf("claim %s: %v", r.ID, err)
					}
				})
			}
		}
		wg.Wait()
		require.Equal(t, 100, countRuns(t, db, tenant, "running"), "exactly the limit")
		require.Empty(t, slotCounts(t, db, tenant), "a counted key has no counter rows")
		q, err := journal.GetFunctionQueue(ctx, db, tenant, "wide")
		require.NoError(t, err)
		require.Equal(t, []journal.QueueKey{{Key: "", Running: 100, Limit: 100, Held: 60}}, q.Keys)

		// 30 runs end at once: 30 held runs are woken.
		var ending []string
		require.NoError(t, db.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM stepgate.run
			WHERE tenant = $1 AND status = 'running' LIMIT 30) r`, tenant).Scan(&ending))
		for _, id := range ending {
			wg.Go(func() {
				_, err := db.Exec(ctx, `UPDATE stepgate.run SET status = 'completed', lease_until = NULL, finished_at = now() WHERE id = $1`, id)
				if err != nil {
					t.Errorf("finish %s: %v", id, err)
				}
			})
		}
		wg.Wait()
		require.Equal(t, 70, countRuns(t, db, tenant, "running"))
		var woken int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND held_on = '' AND wake_at <= now()`, tenant).Scan(&woken))
		require.Equal(t, 30, woken, "as many woken as slots freed")
		// The woken runs are claimed: the limit again, and the rest still held.
		rows, _ := db.Query(ctx, `SELECT id FROM stepgate.run WHERE tenant = $1 AND held_on = '' AND wake_at <= now()`, tenant)
		woke, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, id := range woke {
			wg.Go(func() {
				if _, err := journal.ClaimRunSlots(ctx, db, id, time.Minute); err != nil {
					t.Errorf("claim woken %s: %v", id, err)
				}
			})
		}
		wg.Wait()
		require.Equal(t, 100, countRuns(t, db, tenant, "running"))
	})

	t.Run("CountedKeyUnderChurnNeverPassesItsLimit", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant := newTenant()
		// 64: 32 tickets, so claims are fast below 32 running and exact above. Workers
		// keep up to 6 runs each running (more than the limit in all), end their oldest,
		// and claim the runs a release woke: claims fast, exact and abandoned (SGRTY)
		// meet, and no snapshot ever sees more than 64 running, nor a claim an error.
		const limit, workers, rounds = 64, 16, 40
		mustRegisterWith(t, db, tenant, "churn", `{"concurrency":[{"limit":64}]}`)
		var most atomic.Int32
		done := make(chan struct{})
		var checker sync.WaitGroup
		checker.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				n := countRuns(t, db, tenant, "running")
				for m := most.Load(); int32(n) > m && !most.CompareAndSwap(m, int32(n)); m = most.Load() {
				}
			}
		})
		finish := func(id string) {
			if _, err := db.Exec(ctx, `UPDATE stepgate.run SET status = 'completed', lease_until = NULL, finished_at = now()
				WHERE id = $1 AND status = 'running'`, id); err != nil {
				t.Errorf("finish %s: %v", id, err)
			}
		}
		claim := func(id string) bool {
			c, err := journal.ClaimRunSlots(ctx, db, id, time.Minute)
			if err != nil && !errors.Is(err, journal.ErrHeld) && !errors.Is(err, journal.ErrNotDue) {
				t.Errorf("claim %s: %v", id, err)
			}
			return c != nil
		}
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				var mine []string
				for range rounds {
					r := mustCreateRunOf(t, db, tenant, "churn", func(n *journal.NewRun) { n.Claim, n.Lease = true, time.Minute })
					if r.Status == journal.StatusRunning || claim(r.ID) {
						mine = append(mine, r.ID)
					}
					var woken []string
					rows, _ := db.Query(ctx, `SELECT id FROM stepgate.run WHERE tenant = $1 AND held_on IS NOT NULL
						AND status = 'queued' AND wake_at <= now() ORDER BY created_at LIMIT 2`, tenant)
					woken, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil {
						t.Error(err)
						return
					}
					for _, id := range woken {
						if claim(id) {
							mine = append(mine, id)
						}
					}
					for len(mine) > 6 {
						finish(mine[0])
						mine = mine[1:]
					}
				}
				for _, id := range mine {
					finish(id)
				}
			})
		}
		wg.Wait()
		close(done)
		checker.Wait()
		t.Logf("at most %d running", most.Load())
		require.LessOrEqual(t, most.Load(), int32(limit), "never more than the limit")
		require.Greater(t, most.Load(), int32(limit/2), "the claims were exact near the limit, not only fast")
	})

	t.Run("CountedKeyFarFromItsLimitTakesNoLock", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant := newTenant()
		mustRegisterWith(t, db, tenant, "wide", `{"concurrency":[{"limit":1000}]}`)
		// A claim far from the limit holds one ticket and no hold lock until it commits:
		// inside a transaction, the locks it took are visible in pg_locks.
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		r := mustCreateRunOf(t, tx, tenant, "wide", func(n *journal.NewRun) { n.Claim, n.Lease = true, time.Minute })
		require.Equal(t, journal.StatusRunning, r.Status)
		var advisory int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&advisory))
		require.Equal(t, 1, advisory, "one ticket")
		var counters int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM stepgate.concurrency_slot WHERE tenant = $1`, tenant).Scan(&counters))
		require.Zero(t, counters, "no counter row written")
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

	// slot_keys and slot_limits (0038, expressions only) give what 0029's queries gave.
	t.Run("SlotKeysAsTheQueriesGaveThem", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		const asQueries = `SELECT CASE WHEN count(*) > 0 THEN array_agg(
				CASE WHEN c.v->>'key' IS NULL THEN '' ELSE (c.v->>'key') || '=' || (
					SELECT CASE WHEN octet_length(x) > 200 THEN 'md5:' || md5(x) ELSE x END
					FROM (SELECT coalesce(jsonb_build_object('input', $2::jsonb, 'identity', $3::jsonb)
						#>> string_to_array(c.v->>'key', '.'), '') AS x) val)
				END ORDER BY c.ord) END,
			CASE WHEN count(*) > 0 THEN array_agg((c.v->>'limit')::integer ORDER BY c.ord) END
			FROM jsonb_array_elements(CASE WHEN jsonb_typeof($1::jsonb->'concurrency') = 'array'
				THEN $1::jsonb->'concurrency' ELSE '[]' END) WITH ORDINALITY AS c(v, ord)`
		long := `"` + strings.Repeat("é", 150) + `"`
		identity := `{"subject":"s-1","tenant":"t","roles":["a","b"],"claims":{"org":{"id":7}}}`
		for _, c := range []struct{ config, input string }{
			{`{}`, `{}`},
			{`{"concurrency":[]}`, `{}`},
			{`{"concurrency":{"limit":3}}`, `{}`},
			{`{"concurrency":[{"limit":5}]}`, `{"a":1}`},
			{`{"concurrency":[{"limit":5},{"limit":1,"key":"input.customer_id"}]}`, `{"customer_id":"c-9"}`},
			{`{"concurrency":[{"limit":1,"key":"input.customer_id"}]}`, `{"customer_id":42.5}`},
			{`{"concurrency":[{"limit":1,"key":"input.customer_id"}]}`, `{"customer_id":null}`},
			{`{"concurrency":[{"limit":1,"key":"input.customer_id"}]}`, `{"other":1}`},
			{`{"concurrency":[{"limit":1,"key":"input.customer_id"}]}`, `[1,2]`},
			{`{"concurrency":[{"limit":1,"key":"input.customer_id"}]}`, `"text"`},
			{`{"concurrency":[{"limit":1,"key":"input.a.b"}]}`, `{"a":{"b":{"c":[1,{"d":true}]}}}`},
			{`{"concurrency":[{"limit":1,"key":"input.a"}]}`, `{"a":` + long + `}`},
			{`{"concurrency":[{"limit":1,"key":"input"}]}`, `{"z":1,"a":[2]}`},
			{`{"concurrency":[{"limit":1,"key":"input.list.1"}]}`, `{"list":["x","y"]}`},
			{`{"concurrency":[{"limit":2,"key":"identity.subject"},{"limit":9,"key":"identity.claims.org.id"}]}`, `{}`},
			{`{"concurrency":[{"limit":2,"key":"identity.roles"},{"limit":64,"key":"identity"}]}`, `null`},
		} {
			var wantKeys, gotKeys []string
			var wantLimits, gotLimits []int32
			require.NoError(t, tx.QueryRow(t.Context(), asQueries, c.config, c.input, identity).Scan(&wantKeys, &wantLimits))
			require.NoError(t, tx.QueryRow(t.Context(),
				`SELECT stepgate.slot_keys($1::jsonb, $2::jsonb, $3::jsonb), stepgate.slot_limits($1::jsonb)`,
				c.config, c.input, identity).Scan(&gotKeys, &gotLimits))
			require.Equal(t, wantKeys, gotKeys, "keys of %s with input %s", c.config, c.input)
			require.Equal(t, wantLimits, gotLimits, "limits of %s", c.config)
		}
	})
}

func slotKeys(t *testing.T, db journal.DB, runID string) []string {
	t.Helper()
	var keys []string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT slot_keys FROM stepgate.run WHERE id = $1`, runID).Scan(&keys))
	return keys
}

// slotCounts returns the tenant's counter rows' running runs per concurrency key (keys
// of limits below 64), for the keys that count any.
func slotCounts(t *testing.T, db journal.DB, tenant string) map[string]int {
	t.Helper()
	rows, _ := db.Query(t.Context(), `SELECT key, sum(running)::int FROM stepgate.concurrency_slot
		WHERE tenant = $1 GROUP BY key HAVING sum(running) > 0`, tenant)
	counts := map[string]int{}
	var key string
	var n int
	_, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { counts[key] = n; return nil })
	require.NoError(t, err)
	return counts
}

// countRuns returns how many of the tenant's runs have status.
func countRuns(t *testing.T, db journal.DB, tenant, status string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND status = $2`, tenant, status).Scan(&n))
	return n
}
