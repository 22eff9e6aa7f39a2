package journal_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// mustRegisterWith registers a revision of tenant's function name with config.
func mustRegisterWith(t *testing.T, db journal.DB, tenant, name, config string) {
	t.Helper()
	_, err := journal.RegisterFunction(t.Context(), db, tenant, name, "http://127.0.0.1:1/"+name, json.RawMessage(config), time.Minute, 0)
	require.NoError(t, err)
}

// triggeredBy is a function config with a trigger for each event name.
func triggeredBy(events ...string) string {
	var ts []map[string]string
	for _, e := range events {
		ts = append(ts, map[string]string{"event": e})
	}
	b, _ := json.Marshal(map[string]any{"triggers": ts})
	return string(b)
}

func newEvent(tenant, id, name, data string) journal.NewEvent {
	return journal.NewEvent{
		Tenant: tenant, ID: id, Name: name, Data: json.RawMessage(data),
		Identity: journal.Identity{Subject: "sender", Tenant: tenant, Roles: []string{"invoker"}, Claims: map[string]any{"org": "acme"}},
	}
}

func mustSendEvent(t *testing.T, db journal.DB, n journal.NewEvent) (*journal.Event, bool) {
	t.Helper()
	ev, created, err := journal.SendEvent(t.Context(), db, n)
	require.NoError(t, err)
	return ev, created
}

// runsOf returns the tenant's runs of function, newest first.
func runsOf(t *testing.T, db journal.DB, tenant, function string) []journal.Run {
	t.Helper()
	runs, _, err := journal.ListRuns(t.Context(), db, tenant, journal.RunFilter{Function: function, IncludeIO: true})
	require.NoError(t, err)
	return runs
}

func TestSendEvent(t *testing.T) {
	t.Parallel()

	t.Run("StartsARunOfEachTriggeredFunction", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "a", triggeredBy("order.placed"))
		mustRegisterWith(t, tx, tenant, "b", triggeredBy("other", "order.placed"))
		mustRegisterWith(t, tx, tenant, "prefix", triggeredBy("order.placed.eu", "order"))
		mustRegister(t, tx, tenant, "untriggered")

		n := newEvent(tenant, "e1", "order.placed", `{"order": 7}`)
		ev, created := mustSendEvent(t, tx, n)
		require.True(t, created)
		require.Equal(t, "e1", ev.ID)
		require.Equal(t, tenant, ev.Tenant)
		require.Equal(t, "order.placed", ev.Name)
		require.JSONEq(t, `{"order": 7}`, string(ev.Data))
		require.Equal(t, n.Identity, ev.Identity)
		require.Nil(t, ev.SourceRunID)
		require.Len(t, ev.Runs, 2, "an exact name match only")

		var started []string
		for _, fn := range []string{"a", "b"} {
			runs := runsOf(t, tx, tenant, fn)
			require.Len(t, runs, 1, fn)
			run := runs[0]
			started = append(started, run.ID)
			require.Equal(t, journal.StatusQueued, run.Status)
			require.JSONEq(t, `{"order": 7}`, string(run.Input))
			require.Equal(t, n.Identity, run.Identity, "a triggered run carries the sender's identity")
			require.Equal(t, 1, run.Revision)
			require.Nil(t, run.ParentID)
			require.Equal(t, byte('7'), run.ID[14], "a UUIDv7")
		}
		require.Equal(t, started, ev.Runs, "the event's runs, by function name")
		require.Empty(t, runsOf(t, tx, tenant, "prefix"))
		require.Empty(t, runsOf(t, tx, tenant, "untriggered"))

		got, err := journal.GetEvent(ctx, tx, tenant, "e1")
		require.NoError(t, err)
		require.Equal(t, ev, got)
	})

	t.Run("ARepeatedIDIsTheFirstEventAndStartsNothing", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "a", triggeredBy("ping"))
		first, created := mustSendEvent(t, tx, newEvent(tenant, "dup", "ping", `1`))
		require.True(t, created)
		again, created := mustSendEvent(t, tx, newEvent(tenant, "dup", "ping", `2`))
		require.False(t, created)
		require.Equal(t, first, again)
		other, created := mustSendEvent(t, tx, newEvent(tenant, "dup", "pong", `3`))
		require.False(t, created, "the id alone deduplicates")
		require.Equal(t, first, other)
		require.Len(t, runsOf(t, tx, tenant, "a"), 1)

		// Ids are per tenant.
		tenant2 := newTenant()
		mustRegisterWith(t, tx, tenant2, "a", triggeredBy("ping"))
		_, created = mustSendEvent(t, tx, newEvent(tenant2, "dup", "ping", `1`))
		require.True(t, created)
		require.Len(t, runsOf(t, tx, tenant2, "a"), 1)
	})

	t.Run("AnotherTenantsFunctionsAreNotTriggered", func(t *testing.T) {
		t.Parallel()
		tx, a, b := pgtest.Tx(t), newTenant(), newTenant()
		mustRegisterWith(t, tx, a, "fn", triggeredBy("ping"))
		ev, created := mustSendEvent(t, tx, newEvent(b, "e", "ping", `{}`))
		require.True(t, created)
		require.Empty(t, ev.Runs)
		require.Empty(t, runsOf(t, tx, a, "fn"))
	})

	t.Run("TheCurrentRevisionsTriggersCount", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "fn", triggeredBy("ping"))
		mustRegister(t, tx, tenant, "fn")
		ev, _ := mustSendEvent(t, tx, newEvent(tenant, "e1", "ping", `{}`))
		require.Empty(t, ev.Runs, "revision 2 has no trigger")
		mustRegisterWith(t, tx, tenant, "fn", triggeredBy("ping"))
		ev, _ = mustSendEvent(t, tx, newEvent(tenant, "e2", "ping", `{}`))
		require.Len(t, ev.Runs, 1)
		require.Equal(t, 3, runsOf(t, tx, tenant, "fn")[0].Revision)

		require.NoError(t, journal.DeleteFunction(t.Context(), tx, tenant, "fn"))
		ev, _ = mustSendEvent(t, tx, newEvent(tenant, "e3", "ping", `{}`))
		require.Empty(t, ev.Runs, "a deleted function is not started")
	})

	t.Run("InvokeRolesExcludeSenders", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "payout", `{"invoke_roles": ["billing"], "triggers": [{"event": "pay"}]}`)
		n := newEvent(tenant, "e1", "pay", `{}`)
		ev, created := mustSendEvent(t, tx, n)
		require.True(t, created, "the event is stored")
		require.Empty(t, ev.Runs, "an invoker may not start payout")

		n = newEvent(tenant, "e2", "pay", `{}`)
		n.Identity.Roles = []string{"billing"}
		ev, _ = mustSendEvent(t, tx, n)
		require.Len(t, ev.Runs, 1)
		n = newEvent(tenant, "e3", "pay", `{}`)
		n.Identity.Roles = []string{"admin"} // no check
		ev, _ = mustSendEvent(t, tx, n)
		require.Len(t, ev.Runs, 1)
	})

	t.Run("FromARun", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegisterWith(t, tx, tenant, "fn", triggeredBy("ping"))
		sender := mustCreateRunOf(t, tx, tenant, "fn")
		n := newEvent(tenant, sender.ID+":1", "ping", `null`)
		n.SourceRunID = &sender.ID
		ev, _ := mustSendEvent(t, tx, n)
		require.Equal(t, &sender.ID, ev.SourceRunID)
		require.JSONEq(t, `null`, string(ev.Data))
		require.Len(t, ev.Runs, 1)
	})

	t.Run("NoDataIsNull", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		ev, _ := mustSendEvent(t, tx, journal.NewEvent{Tenant: newTenant(), ID: "e", Name: "n"})
		require.Equal(t, "null", string(ev.Data))
		require.Empty(t, ev.Runs)
		require.NotNil(t, ev.Runs)
	})

	t.Run("NeedsAnIDAndAName", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		_, _, err := journal.SendEvent(t.Context(), tx, journal.NewEvent{Tenant: newTenant(), Name: "n"})
		require.Error(t, err)
		_, _, err = journal.SendEvent(t.Context(), tx, journal.NewEvent{Tenant: newTenant(), ID: "e"})
		require.Error(t, err)
	})

	t.Run("ConcurrentSendsOfOneIDStartOneRun", func(t *testing.T) {
		t.Parallel()
		db, tenant := pgtest.DB(t), newTenant()
		mustRegisterWith(t, db, tenant, "fn", triggeredBy("ping"))
		const senders = 4
		var wg sync.WaitGroup
		created := make(chan bool, senders)
		for i := range senders {
			wg.Go(func() {
				err := pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
					_, c, err := journal.SendEvent(t.Context(), tx, newEvent(tenant, "same", "ping", fmt.Sprint(i)))
					created <- c
					return err
				})
				require.NoError(t, err)
			})
		}
		wg.Wait()
		close(created)
		n := 0
		for c := range created {
			if c {
				n++
			}
		}
		require.Equal(t, 1, n, "one send wins")
		require.Len(t, runsOf(t, db, tenant, "fn"), 1)
	})
}

func TestListEvents(t *testing.T) {
	t.Parallel()
	ctx, db, tenant := t.Context(), pgtest.DB(t), newTenant()
	for i := range 5 {
		name := "even"
		if i%2 == 1 {
			name = "odd"
		}
		mustSendEvent(t, db, newEvent(tenant, fmt.Sprintf("e%d", i), name, `{}`))
	}
	mustSendEvent(t, db, newEvent(newTenant(), "e9", "even", `{}`))

	var ids []string
	var after *journal.Cursor
	for {
		page, next, err := journal.ListEvents(ctx, db, tenant, journal.EventFilter{Limit: 2, After: after})
		require.NoError(t, err)
		for _, ev := range page {
			ids = append(ids, ev.ID)
		}
		if next == nil {
			break
		}
		after = next
	}
	require.Equal(t, []string{"e4", "e3", "e2", "e1", "e0"}, ids, "newest first, each once, one tenant's")

	odd, next, err := journal.ListEvents(ctx, db, tenant, journal.EventFilter{Name: "odd"})
	require.NoError(t, err)
	require.Nil(t, next)
	require.Len(t, odd, 2)
	require.Equal(t, "e3", odd[0].ID)
}

// TestEventsAreFenced checks row-level security on events: a tenant's handle sees and
// writes only its own, even through a query that forgot the tenant filter.
func TestEventsAreFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	system, api := fencedPools(t, 2)
	a, b := newTenant(), newTenant()
	mustSendEvent(t, system, newEvent(a, "e", "ping", `{}`))
	mustSendEvent(t, system, newEvent(b, "e", "ping", `{}`))

	db := journal.ForTenant(api, b)
	tenants := tenantsIn(t, db, `SELECT tenant FROM stepgate.event`)
	require.Len(t, tenants, 1)
	require.Equal(t, b, *tenants[0])
	_, err := journal.GetEvent(ctx, db, a, "e")
	require.ErrorIs(t, err, journal.ErrNotFound, "tenant b's handle, asking in Go for tenant a's event")
	events, _, err := journal.ListEvents(ctx, db, a, journal.EventFilter{})
	require.NoError(t, err)
	require.Empty(t, events)

	_, _, err = journal.SendEvent(ctx, db, newEvent(a, "e2", "ping", `{}`))
	requirePgError(t, err, "42501", "row-level security")

	mustRegisterWith(t, system, b, "fn", triggeredBy("ping"))
	ev, created, err := journal.SendEvent(ctx, db, newEvent(b, "e3", "ping", `{}`))
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, ev.Runs, 1, "the tenant's handle starts the tenant's runs")
}

// TestSendEventQuerySpellsOutItsFragments: EventSend spells out what SendEvent spliced
// in before it was a named query: flowKeys, the tenant's usage of runs and
// DefaultPriority.
func TestSendEventQuerySpellsOutItsFragments(t *testing.T) {
	t.Parallel()
	require.Contains(t, dbsqlc.EventSend, "r.config ?| "+journal.FlowKeys+" AS flowed")
	require.Contains(t, dbsqlc.EventSend, fmt.Sprintf(journal.UsageSum, "runs", "$1")+" + count(*)")
	require.Contains(t, dbsqlc.EventSend, fmt.Sprintf("coalesce((r.config->>'priority')::smallint, %d) AS priority", journal.DefaultPriority))
}
