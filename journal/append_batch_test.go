package journal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// batchCase is a run in some state and the entry a batch brings it.
type batchCase struct {
	name    string
	prepare []journal.Entry // journaled first, by invocation 1
	append  journal.Append  // RunID filled in per run
}

func batchCases() []batchCase {
	return []batchCase{
		{name: "first", append: journal.Append{Invocation: 1, Entry: step(1, "a", `1`)}},
		{name: "next", prepare: []journal.Entry{step(1, "a", `1`)}, append: journal.Append{Invocation: 1, Entry: step(2, "b", `{"x":2}`)}},
		{name: "repeat", prepare: []journal.Entry{step(1, "a", `{"k":1,"j":2}`)}, append: journal.Append{Invocation: 1, Entry: step(1, "a", `{"j":2,"k":1}`)}},
		{name: "conflict", prepare: []journal.Entry{step(1, "charge", `1`)}, append: journal.Append{Invocation: 1, Entry: step(1, "refund", `1`)}},
		{name: "superseded", append: journal.Append{Invocation: 2, Entry: step(1, "a", `1`)}},
		{name: "gap", append: journal.Append{Invocation: 1, Entry: step(3, "a", `1`)}},
		{name: "entries", prepare: []journal.Entry{step(1, "a", `1`)},
			append: journal.Append{Invocation: 1, Entry: step(2, "b", `1`), Bounds: journal.Bounds{MaxEntries: 1}}},
		{name: "bytes", prepare: []journal.Entry{step(1, "a", `"12345"`)},
			append: journal.Append{Invocation: 1, Entry: step(2, "b", `"123456"`), Bounds: journal.Bounds{MaxJournalBytes: 10}}},
		{name: "entry too large", append: journal.Append{Invocation: 1, Entry: step(1, "a", `"123456"`), Bounds: journal.Bounds{MaxEntryBytes: 4}}},
		{name: "windowed", prepare: []journal.Entry{step(1, "a", `1`)},
			append: journal.Append{Invocation: 1, Entry: journal.Entry{Seq: 3, Kind: journal.KindStep, Name: "c", Window: 2}}},
	}
}

// prepareRun creates a claimed run and journals c's prepared entries.
func prepareRun(t *testing.T, db journal.DB, c batchCase) string {
	t.Helper()
	run := mustCreateRun(t, db, claimed)
	for _, e := range c.prepare {
		require.NoError(t, journal.AppendEntry(t.Context(), db, run.ID, 1, e, journal.Bounds{}))
	}
	return run.ID
}

func TestAppendEntries(t *testing.T) {
	t.Parallel()

	t.Run("EachEntryGetsTheAnswerItWouldGetAlone", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		cases := batchCases()
		var batch []journal.Append
		var twins []string
		for _, c := range cases {
			a := c.append
			a.RunID = prepareRun(t, db, c)
			batch = append(batch, a)
			twins = append(twins, prepareRun(t, db, c))
		}
		errs := journal.AppendEntries(ctx, db, batch)
		require.Len(t, errs, len(cases))
		for i, c := range cases {
			a := c.append
			alone := journal.AppendEntry(ctx, db, twins[i], a.Invocation, a.Entry, a.Bounds)
			if alone == nil {
				require.NoError(t, errs[i], c.name)
			} else {
				require.Error(t, errs[i], c.name)
				require.Equal(t, strings.ReplaceAll(alone.Error(), twins[i], batch[i].RunID), errs[i].Error(), c.name)
				for _, target := range []error{journal.ErrConflict, journal.ErrSuperseded, journal.ErrGap, journal.ErrLimit} {
					require.Equal(t, errors.Is(alone, target), errors.Is(errs[i], target), "%s: %v", c.name, target)
				}
			}
			require.Equal(t, entryNames(mustEntries(t, db, twins[i])), entryNames(mustEntries(t, db, batch[i].RunID)), c.name)
		}
		require.Equal(t, []string{"1a"}, entryNames(mustEntries(t, db, batch[0].RunID)), "the first entry is journaled")
		require.ErrorIs(t, errs[3], journal.ErrConflict, "the conflict, beside entries that were journaled")
		require.ErrorIs(t, errs[4], journal.ErrSuperseded)
	})

	t.Run("AValuePostgresCannotStoreFailsOnlyItsOwnEntry", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		good1, bad, good2 := mustCreateRun(t, db, claimed), mustCreateRun(t, db, claimed), mustCreateRun(t, db, claimed)
		errs := journal.AppendEntries(ctx, db, []journal.Append{
			{RunID: good1.ID, Invocation: 1, Entry: step(1, "a", `1`)},
			{RunID: bad.ID, Invocation: 1, Entry: step(1, "nul", `"\u0000"`)}, // jsonb has no NUL
			{RunID: good2.ID, Invocation: 1, Entry: step(1, "b", `2`)},
		})
		require.NoError(t, errs[0])
		require.ErrorContains(t, errs[1], "Postgres cannot store the value")
		require.NoError(t, errs[2])
		require.Len(t, mustEntries(t, db, good1.ID), 1, "rolled back with the batch, then journaled alone")
		require.Empty(t, mustEntries(t, db, bad.ID))
		require.Len(t, mustEntries(t, db, good2.ID), 1)
	})

	t.Run("OnATransactionEachIsWrittenInIt", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		r1, r2 := mustCreateRun(t, tx, claimed), mustCreateRun(t, tx, claimed)
		errs := journal.AppendEntries(ctx, tx, []journal.Append{
			{RunID: r1.ID, Invocation: 1, Entry: step(1, "a", `1`)},
			{RunID: r2.ID, Invocation: 1, Entry: step(2, "a", `1`)},
		})
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], journal.ErrGap)
		require.Len(t, mustEntries(t, tx, r1.ID), 1)
	})
}

func entryNames(es []journal.Entry) []string {
	names := []string{}
	for _, e := range es {
		names = append(names, fmt.Sprint(e.Seq, e.Name))
	}
	return names
}

func TestAppender(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentCheckpointsShareWritesAndAllLand", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		ap := journal.NewAppender(db, 1, time.Minute)
		const runs, steps = 24, 15
		ids := make([]string, runs)
		for i := range ids {
			ids[i] = mustCreateRun(t, db, claimed).ID
		}
		var wg sync.WaitGroup
		errs := make(chan error, runs)
		for _, id := range ids {
			wg.Go(func() {
				for s := 1; s <= steps; s++ {
					if err := ap.Append(ctx, journal.Append{RunID: id, Invocation: 1, Entry: step(s, fmt.Sprint("s", s), fmt.Sprint(s))}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, id := range ids {
			es := mustEntries(t, db, id)
			require.Len(t, es, steps)
			for i, e := range es {
				require.Equal(t, i+1, e.Seq)
				require.JSONEq(t, fmt.Sprint(i+1), string(e.Output))
			}
		}
		require.Positive(t, ap.Batches(), "with one write in flight, 24 callers' checkpoints share writes")
	})

	t.Run("ARefusedEntryIsItsCallersAlone", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		ap := journal.NewAppender(db, 1, time.Minute)
		conflicted := mustCreateRun(t, db, claimed)
		require.NoError(t, journal.AppendEntry(ctx, db, conflicted.ID, 1, step(1, "charge", `1`), journal.Bounds{}))
		others := make([]string, 8)
		for i := range others {
			others[i] = mustCreateRun(t, db, claimed).ID
		}
		var wg sync.WaitGroup
		var conflictErr error
		otherErrs := make([]error, len(others))
		wg.Go(func() {
			conflictErr = ap.Append(ctx, journal.Append{RunID: conflicted.ID, Invocation: 1, Entry: step(1, "refund", `1`)})
		})
		for i, id := range others {
			wg.Go(func() {
				otherErrs[i] = ap.Append(ctx, journal.Append{RunID: id, Invocation: 1, Entry: step(1, "a", `1`)})
			})
		}
		wg.Wait()
		require.ErrorIs(t, conflictErr, journal.ErrConflict)
		for i, id := range others {
			require.NoError(t, otherErrs[i])
			require.Len(t, mustEntries(t, db, id), 1)
		}
	})

	// An entry whose write must wait for another transaction is written alone, in its
	// caller's goroutine: the one write goes on for the others meanwhile.
	for _, blocked := range []struct {
		name string
		hold func(ctx context.Context, tx pgx.Tx, runID string) error
		end  func(tx pgx.Tx, ctx context.Context) error
	}{
		{"ALockedRunHoldsNoWrite", func(ctx context.Context, tx pgx.Tx, runID string) error {
			// The run's row, held as a claim or a lease renewal holds it.
			_, err := tx.Exec(ctx, `UPDATE stepgate.run SET lease_until = now() + interval '1 minute' WHERE id = $1`, runID)
			return err
		}, pgx.Tx.Commit},
		{"AnEntryWaitingForAnotherInsertHoldsNoWrite", func(ctx context.Context, tx pgx.Tx, runID string) error {
			// An uncommitted insert of the same entry, as an answer carrying the step's.
			return journal.AppendEntry(ctx, tx, runID, 1, step(1, "a", `1`), journal.Bounds{})
		}, pgx.Tx.Rollback},
	} {
		t.Run(blocked.name, func(t *testing.T) {
			t.Parallel()
			ctx, db := t.Context(), pgtest.DB(t)
			ap := journal.NewAppender(db, 1, time.Minute)
			busy, free := mustCreateRun(t, db, claimed), mustCreateRun(t, db, claimed)
			holder, err := db.Begin(ctx)
			require.NoError(t, err)
			defer holder.Rollback(context.WithoutCancel(ctx))
			require.NoError(t, blocked.hold(ctx, holder, busy.ID))

			busyDone := make(chan error, 1)
			go func() {
				busyDone <- ap.Append(ctx, journal.Append{RunID: busy.ID, Invocation: 1, Entry: step(1, "a", `1`)})
			}()
			eventuallyTrue(t, func() bool { return waitingForLock(t, db) })
			bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, ap.Append(bounded, journal.Append{RunID: free.ID, Invocation: 1, Entry: step(1, "b", `1`)}),
				"the write is free for another run's entry")
			select {
			case err := <-busyDone:
				t.Fatalf("busy's entry was answered (%v) while the other transaction was open", err)
			default:
			}
			require.NoError(t, blocked.end(holder, ctx))
			require.NoError(t, <-busyDone, "written alone once the other transaction ends")
			require.Len(t, mustEntries(t, db, busy.ID), 1)
		})
	}

	t.Run("AnEntryQueuedByACallerWhoGaveUpIsNotWritten", func(t *testing.T) {
		t.Parallel()
		ctx, pool := t.Context(), pgtest.DB(t)
		db := &gatedDB{Pool: pool, gate: make(chan struct{}), entered: make(chan struct{}, 8)}
		ap := journal.NewAppender(db, 1, time.Minute)
		busy, gaveUp := mustCreateRun(t, pool, claimed), mustCreateRun(t, pool, claimed)
		busyDone := make(chan error, 1)
		go func() {
			busyDone <- ap.Append(ctx, journal.Append{RunID: busy.ID, Invocation: 1, Entry: step(1, "a", `1`)})
		}()
		<-db.entered // the one write is busy's, held at the gate

		waiting, cancel := context.WithCancel(ctx)
		gaveUpDone := make(chan error, 1)
		go func() {
			gaveUpDone <- ap.Append(waiting, journal.Append{RunID: gaveUp.ID, Invocation: 1, Entry: step(1, "b", `1`)})
		}()
		eventuallyTrue(t, func() bool { return ap.Queued() == 1 })
		cancel()
		require.ErrorIs(t, <-gaveUpDone, context.Canceled)

		close(db.gate)
		require.NoError(t, <-busyDone)
		// The write is idle again once this one is answered: what it took is settled.
		require.NoError(t, ap.Append(ctx, journal.Append{RunID: busy.ID, Invocation: 1, Entry: step(2, "c", `1`)}))
		require.Empty(t, mustEntries(t, pool, gaveUp.ID), "its caller was told it failed: not journaled behind its back")
		require.Len(t, mustEntries(t, pool, busy.ID), 2)
	})

	t.Run("ConnectionsKilledMidWriteLoseNoAcknowledgedEntry", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		url := pgtest.DBURL(t)
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		cfg.MaxConns = 6
		cfg.ConnConfig.RuntimeParams["application_name"] = "appender-under-test"
		db, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(db.Close)
		ap := journal.NewAppender(db, 2, time.Minute)

		const runs, steps = 12, 25
		ids := make([]string, runs)
		for i := range ids {
			ids[i] = mustCreateRun(t, db, claimed).ID
		}
		// Every few acknowledged entries, the connections busy with a statement are killed.
		kick := make(chan struct{}, 1)
		killed := make(chan int, 1)
		go func() {
			n := 0
			defer func() { killed <- n }()
			for range kick {
				var k int
				_ = db.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = 'appender-under-test'
						AND pid <> pg_backend_pid() AND state = 'active'`).Scan(&k)
				n += k
			}
		}()
		var acked atomic.Int64
		var wg sync.WaitGroup
		failures := make(chan error, runs)
		for _, id := range ids {
			wg.Go(func() {
				for s := 1; s <= steps; s++ {
					e := step(s, fmt.Sprint("s", s), fmt.Sprint(s))
					// Retry until acknowledged: a retry of a journaled entry is a no-op. Were
					// an entry acknowledged before its commit and then lost, the next seq
					// would be refused as a gap.
					for attempt := 0; ; attempt++ {
						err := ap.Append(ctx, journal.Append{RunID: id, Invocation: 1, Entry: e})
						if err == nil {
							if acked.Add(1)%7 == 0 {
								select {
								case kick <- struct{}{}:
								default:
								}
							}
							break
						}
						if errors.Is(err, journal.ErrGap) || errors.Is(err, journal.ErrConflict) || attempt > 50 {
							failures <- fmt.Errorf("run %s seq %d: %w", id, s, err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(kick)
		n := <-killed
		close(failures)
		for err := range failures {
			require.NoError(t, err)
		}
		// Read back through a pool of its own: one of db's idle connections may have been
		// killed just after its statement finished, and would fail the first query.
		verify, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(verify.Close)
		for _, id := range ids {
			require.Len(t, mustEntries(t, verify, id), steps)
		}
		t.Logf("%d connections killed mid-statement, %d shared writes", n, ap.Batches())
		require.Positive(t, n, "the test killed no connection")
	})
}

// gatedDB is a pool whose batches wait at a gate until it is closed, telling entered
// when one arrives: it holds an Appender's write in flight.
type gatedDB struct {
	*pgxpool.Pool
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	g.entered <- struct{}{}
	<-g.gate
	return g.Pool.SendBatch(ctx, b)
}

// waitingForLock reports whether a connection of db's database waits for a row lock.
func waitingForLock(t *testing.T, db *pgxpool.Pool) bool {
	var n int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
	return n > 0
}

// eventuallyTrue waits for cond, failing the test after 10 s.
func eventuallyTrue(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond)
}
