package journal_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// errRollback ends a transaction a test only looks into.
var errRollback = errors.New("rolled back")

// TestWaitEventLookBackUsesTheIndex: a wait's look-back reads the events of its tenant
// and name since its time through the index event_by_name, not every event: 300,000
// events of the tenant's other names and of other tenants are not read. The times of a look-back's wait over 30 days of the name's events, with
// no match (the worst case: each is read), and over a minute, are logged.
func TestWaitEventLookBackUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx, db, tenant := t.Context(), pgtest.DB(t), newTenant()
	mustRegister(t, db, tenant, "waiter")
	// 20,000 orders.paid of the tenant over 30 days (the last minute's among them), and
	// 300,000 other events of 20 other names, of the tenant and of 45 others.
	mustExec(t, db, `INSERT INTO stepgate.event (tenant, id, name, data, identity, created_at)
		SELECT $1, 'paid-' || i, 'orders.paid', jsonb_build_object('order_id', 'o-' || i), '{}',
			now() - (i * interval '130 seconds')
		FROM generate_series(0, 19999) i`, tenant)
	mustExec(t, db, `INSERT INTO stepgate.event (tenant, id, name, data, identity, created_at)
		SELECT CASE WHEN i % 5 = 0 THEN $1 ELSE 'tenant-other-' || (i % 50) END, 'other-' || i,
			'orders.n' || (i % 20),
			jsonb_build_object('order_id', 'o-' || i), '{}', now() - (i * interval '8 seconds')
		FROM generate_series(0, 299999) i`, tenant)
	mustExec(t, db, `ANALYZE stepgate.event`)

	run := mustCreateRunOf(t, db, tenant, "waiter", claimed)
	match, _ := json.Marshal(map[string]string{"data.order_id": "o-none"})
	var plan []string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, "EXPLAIN "+dbsqlc.WaitEventStore, tenant, "orders.paid", dbNow(t, db).Add(-30*24*time.Hour),
			json.RawMessage(`{"data":{"order_id":"o-none"}}`), []string{"data.order_id"}, match, run.ID, 1, 0, "wait", 1, time.Now().Add(time.Hour))
		var err error
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	require.NotContains(t, text, "Seq Scan on event", text)
	require.NotContains(t, text, "event_by_created", text)
	probe := false
	for i, line := range plan {
		if strings.Contains(line, "event_by_name") && i+1 < len(plan) {
			probe = probe || strings.Contains(plan[i+1], "Index Cond") && strings.Contains(plan[i+1], "created_at >=")
		}
	}
	require.True(t, probe, "the tenant, name and since are an index condition of event_by_name:\n%s", text)

	for _, look := range []time.Duration{30 * 24 * time.Hour, time.Minute} {
		var took time.Duration
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			start := time.Now()
			f, err := journal.Finish(ctx, tx, run.ID, 1, journal.WaitingForEvent(journal.WaitEvent{
				Seq: 1, Name: "wait", Event: "orders.paid", Match: map[string]json.RawMessage{"data.order_id": json.RawMessage(`"o-none"`)},
				Timeout: time.Hour, Since: dbNow(t, db).Add(-look), LookBack: 31 * 24 * time.Hour,
			}))
			took = time.Since(start)
			require.NoError(t, err)
			require.True(t, f.WakeAt.After(f.Clock), "nothing matched: it waits")
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		t.Logf("a wait looking back %s over the name's events (none matching) took %s", look, took)
	}
}

// TestWaitEventLookBackBounds: a look-back's Since after the database clock, or more
// than LookBack before it, is ErrBadAwait; at the bound it waits.
func TestWaitEventLookBackBounds(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	now := dbNow(t, db)
	for _, tc := range []struct {
		name    string
		since   time.Time
		message string
	}{
		{"Future", now.Add(time.Hour), "is after the database clock"},
		{"BeyondLookBack", now.Add(-25 * time.Hour), "is further back than the event retention (24h0m0s, STEPGATE_RETENTION)"},
		{"Within", now.Add(-23 * time.Hour), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
				run := mustCreateRun(t, tx, claimed)
				_, err := journal.Finish(t.Context(), tx, run.ID, 1, journal.WaitingForEvent(journal.WaitEvent{
					Seq: 1, Name: "wait", Event: "e", Match: map[string]json.RawMessage{}, Timeout: time.Hour,
					Since: tc.since, LookBack: 24 * time.Hour,
				}))
				return err
			})
			if tc.message == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, journal.ErrBadAwait)
			require.ErrorContains(t, err, tc.message)
		})
	}
}

// TestWaitEventLookBackMatchesAsAResume: an event stored before the wait (taken by its
// look-back, whose look-up first keeps the events that contain the match's values)
// matches exactly when the same event sent after the wait resumes it.
func TestWaitEventLookBackMatchesAsAResume(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	for _, tc := range []struct {
		name, match, id, data string
		want                  bool
	}{
		{"NumberByValue", `{"data.amount": 100}`, "e", `{"amount": 100.0}`, true},
		{"NumberInExponent", `{"data.amount": 1e2}`, "e", `{"amount": 100}`, true},
		{"Decimal", `{"data.amount": 0.10}`, "e", `{"amount": 0.1}`, true},
		{"NumberIsNotString", `{"data.amount": 100}`, "e", `{"amount": "100"}`, false},
		{"Nested", `{"data.a.b": "x"}`, "e", `{"a": {"b": "x", "c": 1}}`, true},
		{"InAnArray", `{"data.a": "x"}`, "e", `{"a": ["x"]}`, false},
		{"AnObject", `{"data.a": 1}`, "e", `{"a": {"b": 1}}`, false},
		{"Null", `{"data.a": null}`, "e", `{"a": null}`, true},
		{"NullIsNotAbsent", `{"data.a": null}`, "e", `{}`, false},
		{"Boolean", `{"data.a": true, "data.b": "y"}`, "e", `{"a": true, "b": "y"}`, true},
		{"OneOfTwo", `{"data.a": true, "data.b": "y"}`, "e", `{"a": true, "b": "z"}`, false},
		{"ID", `{"id": "pay-1"}`, "pay-1", `{}`, true},
		{"OtherID", `{"id": "pay-1"}`, "pay-2", `{}`, false},
		{"Name", `{"name": "orders.paid"}`, "e", `{}`, true},
		{"CrossingPaths", `{"data.a": "x", "data.a.b": "y"}`, "e", `{"a": "x"}`, false},
		{"Everything", `{}`, "e", `[1]`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var match map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(tc.match), &match))
			// Looked back at: stored before the wait.
			tenant := newTenant()
			mustRegister(t, db, tenant, "fn")
			run := mustCreateRunOf(t, db, tenant, "fn", claimed)
			since := dbNow(t, db)
			require.Empty(t, sendAndResume(t, db, tenant, tc.id, "orders.paid", tc.data))
			f, err := waitFor(t, db, run, "orders.paid", match, since)
			require.NoError(t, err)
			require.Equal(t, tc.want, !f.WakeAt.After(f.Clock), "looked back at")
			// Resumed: sent after the wait.
			tenant = newTenant()
			mustRegister(t, db, tenant, "fn")
			run = mustCreateRunOf(t, db, tenant, "fn", claimed)
			_, err = waitFor(t, db, run, "orders.paid", match, dbNow(t, db))
			require.NoError(t, err)
			require.Equal(t, tc.want, len(sendAndResume(t, db, tenant, tc.id, "orders.paid", tc.data)) == 1, "resumed")
		})
	}
}

// BenchmarkWaitEventSuspend measures a run's suspension on a wait_event that finds no
// event (the look-up since the invocation's start, then the wait's row), on a table of
// 100,000 events of its tenant, 10,000 of them of its name.
func BenchmarkWaitEventSuspend(b *testing.B) {
	db, tenant := pgtest.DB(b), newTenant()
	mustRegister(b, db, tenant, "waiter")
	for _, stmt := range []string{
		`INSERT INTO stepgate.event (tenant, id, name, data, identity, created_at)
		SELECT $1, 'old-' || i, 'orders.' || (i % 10), jsonb_build_object('order_id', 'o-' || i), '{}',
			now() - (i * interval '25 seconds')
		FROM generate_series(0, 99999) i`,
		`ANALYZE stepgate.event`,
	} {
		var args []any
		if strings.Contains(stmt, "$1") {
			args = append(args, tenant)
		}
		if _, err := db.Exec(b.Context(), stmt, args...); err != nil {
			b.Fatal(err)
		}
	}
	match := map[string]json.RawMessage{"data.order_id": json.RawMessage(`"o-none"`)}
	b.ReportAllocs()
	for b.Loop() {
		err := pgx.BeginFunc(b.Context(), db, func(tx pgx.Tx) error {
			run := mustCreateRunOf(b, tx, tenant, "waiter", claimed)
			_, err := journal.Finish(b.Context(), tx, run.ID, 1, journal.WaitingForEvent(journal.WaitEvent{
				Seq: 1, Name: "wait", Event: "orders.1", Match: match, Timeout: time.Hour, Since: run.CreatedAt,
			}))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
