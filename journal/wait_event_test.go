package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// waitFor makes the claimed run's invocation 1 wait for event name with match, events
// since since counting, and returns what Finish reported.
func waitFor(t *testing.T, db journal.DB, run *journal.Run, name string, match map[string]json.RawMessage, since time.Time) (*journal.Finished, error) {
	return journal.Finish(t.Context(), db, run.ID, 1, journal.WaitingForEvent(journal.WaitEvent{
		Seq: 1, Name: "wait", Event: name, Match: match, Timeout: time.Hour, Since: since,
	}))
}

// sendAndResume stores an event of tenant and resumes its waiters, in one transaction.
func sendAndResume(t *testing.T, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, tenant, id, name, data string) []string {
	var resumed []string
	err := pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
		ev, created, err := journal.SendEvent(t.Context(), tx, journal.NewEvent{
			Tenant: tenant, ID: id, Name: name, Data: json.RawMessage(data), Identity: journal.Identity{Subject: "sender", Tenant: tenant},
		})
		if err != nil || !created {
			return err
		}
		resumed, err = journal.ResumeWaiters(t.Context(), tx, ev)
		return err
	})
	require.NoError(t, err)
	return resumed
}

// TestWaitEventRace races, many times over, a run deciding to wait for an event with
// the event that matches it, each in its own transaction on its own connection. Every
// run must get its event exactly once: journaled when the wait was stored (the event
// committed first) or by the event's transaction (the wait committed first), never
// neither (lost) and never both.
func TestWaitEventRace(t *testing.T) {
	t.Parallel()
	ctx, db, tenant := t.Context(), pgtest.DB(t), newTenant()
	mustRegister(t, db, tenant, "waiter")
	const n = 60
	runs := make([]*journal.Run, n)
	for i := range runs {
		runs[i] = mustCreateRunOf(t, db, tenant, "waiter", claimed)
	}
	since := dbNow(t, db).Add(-time.Second)

	var wg sync.WaitGroup
	resumedBy := make([][]string, n)
	atWait := make([]bool, n)
	for i, run := range runs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			match := map[string]json.RawMessage{"data.order": json.RawMessage(fmt.Sprintf(`"o-%d"`, i))}
			if i%3 == 0 {
				// Some with a shape of their own, new to the event name.
				match["data.n"] = json.RawMessage(fmt.Sprint(i))
			}
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				f, err := waitFor(t, tx, run, "orders.paid", match, since)
				if err == nil {
					atWait[i] = !f.WakeAt.After(f.Clock)
				}
				return err
			})
			require.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			resumedBy[i] = sendAndResume(t, db, tenant, fmt.Sprintf("ev-%d", i), "orders.paid", fmt.Sprintf(`{"order":"o-%d","n":%d}`, i, i))
		}()
	}
	wg.Wait()

	for i, run := range runs {
		es := mustEntries(t, db, run.ID)
		require.Len(t, es, 1, "run %d got its event (lost otherwise)", i)
		var out struct {
			Event struct {
				ID string `json:"id"`
			} `json:"event"`
		}
		require.NoError(t, json.Unmarshal(es[0].Output, &out))
		require.Equal(t, fmt.Sprintf("ev-%d", i), out.Event.ID)
		byEvent := len(resumedBy[i]) == 1 && resumedBy[i][0] == run.ID
		require.True(t, byEvent != atWait[i], "run %d: resumed once, by the event (%v) or at its wait (%v)", i, byEvent, atWait[i])
		got := mustGetRun(t, db, run)
		require.Equal(t, journal.StatusSuspended, got.Status)
		require.False(t, got.WakeAt.After(dbNow(t, db)), "due now")
	}
	var byWait int
	for _, w := range atWait {
		if w {
			byWait++
		}
	}
	t.Logf("%d runs found their event when they stored their wait, %d were resumed by it", byWait, n-byWait)
	var left int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM stepgate.run_wait WHERE tenant = $1`, tenant).Scan(&left))
	require.Zero(t, left, "no wait is left behind")
}

// TestWaitEvent covers a wait's life apart from the race: the timeout journaled by the
// claim, the shapes' bound, and a cancellation.
func TestWaitEvent(t *testing.T) {
	t.Parallel()

	t.Run("TheClaimAfterTheTimeoutJournalsIt", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "waiter")
		run := mustCreateRunOf(t, tx, tenant, "waiter", claimed)
		_, err := waitFor(t, tx, run, "e", map[string]json.RawMessage{}, dbNow(t, tx))
		require.NoError(t, err)
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID) // as if an hour passed
		c, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		require.Len(t, c.Journal, 1)
		require.Equal(t, journal.KindWaitEvent, c.Journal[0].Kind)
		require.JSONEq(t, `{"timed_out":true}`, string(c.Journal[0].Output))
		require.Empty(t, sendAndResume(t, tx, tenant, "late", "e", `{}`), "the wait is gone")
	})

	t.Run("ShapesAreBoundedPerEventName", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "waiter")
		for i := range journal.MaxWaitShapes + 1 {
			run := mustCreateRunOf(t, tx, tenant, "waiter", claimed)
			_, err := waitFor(t, tx, run, "e", map[string]json.RawMessage{fmt.Sprintf("data.f%d", i): json.RawMessage(`1`)}, dbNow(t, tx))
			if i < journal.MaxWaitShapes {
				require.NoError(t, err)
				continue
			}
			var le *journal.LimitError
			require.ErrorAs(t, err, &le)
			require.Contains(t, le.Message, "64 different sets of match paths")
		}
		// A known shape still waits; another event name has its own bound.
		run := mustCreateRunOf(t, tx, tenant, "waiter", claimed)
		_, err := waitFor(t, tx, run, "e", map[string]json.RawMessage{"data.f0": json.RawMessage(`2`)}, dbNow(t, tx))
		require.NoError(t, err)
		run = mustCreateRunOf(t, tx, tenant, "waiter", claimed)
		_, err = waitFor(t, tx, run, "other", map[string]json.RawMessage{"data.f99": json.RawMessage(`2`)}, dbNow(t, tx))
		require.NoError(t, err)
	})

	t.Run("AnEventBeforeSinceDoesNotMatch", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "waiter")
		sendAndResume(t, tx, tenant, "old", "e", `{}`)
		run := mustCreateRunOf(t, tx, tenant, "waiter", claimed)
		f, err := waitFor(t, tx, run, "e", map[string]json.RawMessage{}, dbNow(t, tx).Add(time.Hour))
		require.NoError(t, err)
		require.True(t, f.WakeAt.After(f.Clock), "waits")
		require.Empty(t, mustEntries(t, tx, run.ID))
	})

	t.Run("CancelDeletesTheWait", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "waiter")
		run := mustCreateRunOf(t, tx, tenant, "waiter", claimed)
		_, err := waitFor(t, tx, run, "e", map[string]json.RawMessage{}, dbNow(t, tx))
		require.NoError(t, err)
		_, err = journal.CancelRun(ctx, tx, tenant, run.ID, journal.Identity{Subject: "op"})
		require.NoError(t, err)
		require.Empty(t, sendAndResume(t, tx, tenant, "after", "e", `{}`))
		require.Empty(t, mustEntries(t, tx, run.ID))
	})
}

// TestResumeWaitersUsesTheIndex: as the gateway's tenant role, under row-level security,
// an event finds its waiters through the index on their keys, not by reading every
// wait (which the planner must do when the comparison is not leakproof, as jsonb's is
// not): 100,000 runs waiting on other keys would cost each event a scan.
func TestResumeWaitersUsesTheIndex(t *testing.T) {
	t.Parallel()
	system, api, url := fencedPoolsOn(t, 2)
	tenant := newTenant()
	// 2,000 runs of the tenant wait on other keys of the same event name, and the
	// planner knows it.
	for _, stmt := range []string{
		`INSERT INTO stepgate.wait_shape (tenant, event_name, paths) VALUES ($1, 'orders.paid', '{data.order_id}')`,
		`INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity)
		SELECT gen_random_uuid(), $1, 'waiter', 1, 'suspended', '{}', '{}' FROM generate_series(1, 2000)`,
		`INSERT INTO stepgate.run_wait (run_id, seq, tenant, name, kind, event_name, match_key, expires_at)
		SELECT r.id, 1, r.tenant, 'w', 'wait_event', 'orders.paid',
			stepgate.match_of(jsonb_build_object('data.order_id', 'other-' || r.id)), now() + interval '1 hour'
		FROM stepgate.run r WHERE r.tenant = $1`,
	} {
		var args []any
		if strings.Contains(stmt, "$1") {
			args = append(args, tenant)
		}
		_, err := system.Exec(t.Context(), stmt, args...)
		require.NoError(t, err)
	}
	owner, err := pgx.Connect(t.Context(), url) // the tables' owner may ANALYZE them
	require.NoError(t, err)
	defer owner.Close(context.Background())
	_, err = owner.Exec(t.Context(), `ANALYZE stepgate.run_wait, stepgate.wait_shape`)
	require.NoError(t, err)
	var plan []string
	err = pgx.BeginFunc(t.Context(), journal.ForTenant(api, tenant), func(tx pgx.Tx) error {
		// The statement's parameters: tenant, event, doc, id.
		rows, _ := tx.Query(t.Context(), "EXPLAIN "+journal.ResumeWaitersSQL, tenant, "orders.paid",
			json.RawMessage(`{"id":"e1","name":"orders.paid","data":{"order_id":"o-1"}}`), "e1")
		var err error
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	require.NotContains(t, text, "Seq Scan on run_wait", text)
	// The key is in the index condition: one probe, not every wait of the event name.
	probe := false
	for i, line := range plan {
		if strings.Contains(line, "run_wait_by_match") && i+1 < len(plan) {
			probe = probe || strings.Contains(plan[i+1], "Index Cond") && strings.Contains(plan[i+1], "match_key =")
		}
	}
	require.True(t, probe, "the key is an index condition of run_wait_by_match:\n%s", text)
}

// TestWaitQueriesSpellOutTheKinds: the named queries that journal a wait's event spell
// out KindWaitEvent and KindWaitAny, which a sqlc query cannot splice in.
func TestWaitQueriesSpellOutTheKinds(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		sql             string
		waitEvent, wany int
	}{
		"WaitEventStore": {dbsqlc.WaitEventStore, 4, 1},
		"WaitResume":     {dbsqlc.WaitResume, 2, 0},
	} {
		require.Equal(t, c.waitEvent, strings.Count(c.sql, "'"+journal.KindWaitEvent+"'"), name)
		require.Equal(t, c.wany, strings.Count(c.sql, "'"+journal.KindWaitAny+"'"), name)
	}
}
