package journal_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/flow"
)

// In one transaction now() stands still, so a run of starts shows the rate's arithmetic
// exactly.
func TestFlow(t *testing.T) {
	t.Parallel()

	t.Run("ThrottleSchedulesAtTheRateUpToMaxQueue", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		r := flow.Rate{Interval: time.Second, Burst: 2}
		var starts []time.Duration
		for range 5 {
			start, now, _, ok, err := flow.Throttle(ctx, tx, tenant, "fn", "c-9", r, 2*time.Second)
			require.NoError(t, err)
			require.True(t, ok)
			starts = append(starts, start.Sub(now))
		}
		require.Equal(t, []time.Duration{0, 0, 0, time.Second, 2 * time.Second}, starts, "burst+1 at once, then one a second")
		_, _, after, ok, err := flow.Throttle(ctx, tx, tenant, "fn", "c-9", r, 2*time.Second)
		require.NoError(t, err)
		require.False(t, ok, "two wait already")
		require.Equal(t, time.Second, after, "when the first waiting start leaves")

		// Other keys, functions and tenants have their own state.
		for _, k := range [][3]string{{tenant, "fn", "c-1"}, {tenant, "other", "c-9"}, {newTenant(), "fn", "c-9"}} {
			start, now, _, ok, err := flow.Throttle(ctx, tx, k[0], k[1], k[2], r, 2*time.Second)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, now, start)
		}
	})

	t.Run("RateLimitRefusesBeyondTheRateAndTakesNothing", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		r := flow.Rate{Interval: time.Hour, Burst: 1}
		for range 2 {
			_, ok, err := flow.TakeRate(ctx, tx, tenant, "fn", "", r)
			require.NoError(t, err)
			require.True(t, ok)
		}
		for range 2 {
			after, ok, err := flow.TakeRate(ctx, tx, tenant, "fn", "", r)
			require.NoError(t, err)
			require.False(t, ok)
			require.Equal(t, time.Hour, after, "a refusal does not move the bucket")
		}
	})

	t.Run("CreateRunRefusesAFlowControlledRevisionUnlessFlowed", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		mustRegisterWith(t, tx, tenant, "fn", `{"throttle":{"limit":1,"period":"1s"}}`)
		n := journal.NewRun{ID: newID(), Tenant: tenant, Function: "fn", Input: json.RawMessage(`{}`),
			Identity: journal.Identity{Subject: "s", Tenant: tenant, Roles: []string{"admin"}}}
		_, _, err := journal.CreateRun(ctx, tx, n)
		var fe *journal.FlowError
		require.ErrorAs(t, err, &fe)
		require.JSONEq(t, `{"throttle":{"limit":1,"period":"1s"}}`, string(fe.Config))
		held := "throttled"
		n.Flowed, n.Held = true, &held
		run, created, err := journal.CreateRun(ctx, tx, n)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, held, *run.Held)
	})

	t.Run("DebounceCollapsesIntoTheScheduledRun", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		mustRegisterWith(t, tx, tenant, "fn", `{"debounce":{"period":"1m"}}`)
		id := journal.Identity{Subject: "a", Tenant: tenant, Roles: []string{"admin"}}
		d := journal.DebounceStart{Tenant: tenant, Function: "fn", Key: "k", RunID: newID(),
			Input: json.RawMessage(`{"n":1}`), Identity: id, Period: time.Minute, MaxWait: 90 * time.Second}
		collapsed, at, err := journal.Debounce(ctx, tx, d)
		require.NoError(t, err)
		require.Nil(t, collapsed)
		first := mustCreateRunOf(t, tx, tenant, "fn", func(n *journal.NewRun) { n.ID, n.StartAt, n.Flowed = d.RunID, &at, true })

		bob := journal.Identity{Subject: "b", Tenant: tenant, Roles: []string{"admin"}}
		d2 := d
		d2.RunID, d2.Input, d2.Identity = newID(), json.RawMessage(`{"n":2}`), bob
		collapsed, _, err = journal.Debounce(ctx, tx, d2)
		require.NoError(t, err)
		require.NotNil(t, collapsed)
		require.Equal(t, first.ID, collapsed.ID)
		require.JSONEq(t, `{"n":2}`, string(collapsed.Input))
		require.Equal(t, "b", collapsed.Identity.Subject, "the last start's input runs as its caller")
		require.Equal(t, at, *collapsed.WakeAt, "now() stands still in the transaction: now + period")
		require.Equal(t, mustGetRun(t, tx, first), collapsed, "the collapsed run reads as GetRun reads it")

		// Once the run has left scheduled (here cancelled), a start opens a new window.
		_, err = journal.CancelRun(ctx, tx, tenant, first.ID, id)
		require.NoError(t, err)
		d3 := d
		d3.RunID = newID()
		collapsed, _, err = journal.Debounce(ctx, tx, d3)
		require.NoError(t, err)
		require.Nil(t, collapsed)
		got := mustGetRun(t, tx, first)
		require.JSONEq(t, `{"n":2}`, string(got.Input), "a started run takes no input")
	})

	t.Run("PruneKeepsLiveState", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		_, _, _, _, err := flow.Throttle(ctx, tx, tenant, "fn", "live", flow.Rate{Interval: time.Hour}, 10*time.Hour)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO stepgate.flow_rate (tenant, function, kind, key, tat) VALUES ($1, 'fn', 'throttle', 'old', now() - interval '2 minutes')`, tenant)
		require.NoError(t, err)
		_, err = flow.PruneFlow(ctx, tx, 1000)
		require.NoError(t, err)
		var keys []string
		require.NoError(t, tx.QueryRow(ctx, `SELECT array_agg(key) FROM stepgate.flow_rate WHERE tenant = $1`, tenant).Scan(&keys))
		require.Equal(t, []string{"live"}, keys)
	})
}
