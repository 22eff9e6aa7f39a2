package journal_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/appcheck"
)

func TestLiveRunsToCheck(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	tenant := newTenant()
	mustRegister(t, tx, tenant, "fn")
	mustRegister(t, tx, tenant, "other")
	// suspendAfter makes a run of function that journaled steps 1..n and waits to retry
	// step n+1.
	suspendAfter := func(function string, n int) string {
		run := mustCreateRunOf(t, tx, tenant, function, claimed)
		var steps []journal.Entry
		for i := 1; i <= n; i++ {
			steps = append(steps, step(i, "s", `1`))
		}
		_, err := journal.Finish(ctx, tx, run.ID, 1, journal.RetryingStep(journal.StepRetry{
			Failure: journal.Failure{Seq: n + 1, Attempt: 1, Name: "s", Error: journal.ErrorInfo{Type: "t", Message: "m"}}, After: time.Hour,
		}, steps...))
		require.NoError(t, err)
		return run.ID
	}
	atOne := map[string]bool{suspendAfter("fn", 1): true, suspendAfter("fn", 1): true, suspendAfter("fn", 1): true}
	atTwo := suspendAfter("fn", 2)
	suspendAfter("other", 1)
	mustCreateRunOf(t, tx, tenant, "fn") // queued, nothing journaled: any code replays it
	done := mustCreateRunOf(t, tx, tenant, "fn", claimed)
	_, err := journal.Finish(ctx, tx, done.ID, 1, withSteps(journal.Completed(json.RawMessage(`1`)), step(1, "s", `1`)))
	require.NoError(t, err)

	two, err := appcheck.LiveRunsToCheck(ctx, tx, tenant, "fn", 2)
	require.NoError(t, err)
	require.Equal(t, 4, two.Live, "the runs not ended with a journal")
	require.False(t, two.More)
	require.Len(t, two.Sample, 2)
	ids := []string{two.Sample[0].ID, two.Sample[1].ID}
	require.Contains(t, ids, atTwo, "one run of each place in the journal first")
	require.True(t, atOne[ids[0]] || atOne[ids[1]], "one run of each place in the journal first: %v", ids)
	require.Equal(t, 1, two.Sample[0].Revision)

	all, err := appcheck.LiveRunsToCheck(ctx, tx, tenant, "fn", 100)
	require.NoError(t, err)
	require.Len(t, all.Sample, 4)
	for _, r := range all.Sample {
		require.True(t, atOne[r.ID] || r.ID == atTwo, "only live runs with a journal: %s", r.ID)
	}

	none, err := appcheck.LiveRunsToCheck(ctx, tx, "another-tenant", "fn", 100)
	require.NoError(t, err)
	require.Empty(t, none.Sample, "another tenant's runs are not its")
}

func TestFunctionCheck(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	tenant := newTenant()
	_, err := appcheck.GetFunctionCheck(ctx, tx, tenant, "fn")
	require.ErrorIs(t, err, journal.ErrNotFound)
	at := time.Now().UTC().Truncate(time.Millisecond)

	// A check of a name the tenant has not registered (a dry run of a manifest listing
	// any names) is kept nowhere.
	ghost := appcheck.FunctionCheck{Tenant: tenant, Function: "fn", CheckedAt: at, Subject: "a", Result: json.RawMessage(`{"live": 0}`)}
	require.NoError(t, appcheck.PutFunctionCheck(ctx, tx, ghost))
	_, err = appcheck.GetFunctionCheck(ctx, tx, tenant, "fn")
	require.ErrorIs(t, err, journal.ErrNotFound, "fn is not registered: its check is not kept")
	mustRegister(t, tx, tenant, "fn")

	first := appcheck.FunctionCheck{Tenant: tenant, Function: "fn", CheckedAt: at, Subject: "a", Registered: false, Result: json.RawMessage(`{"live": 1}`)}
	require.NoError(t, appcheck.PutFunctionCheck(ctx, tx, first))
	second := appcheck.FunctionCheck{Tenant: tenant, Function: "fn", CheckedAt: at.Add(time.Minute), Subject: "b", Registered: true, Forced: true, Result: json.RawMessage(`{"live": 2}`)}
	require.NoError(t, appcheck.PutFunctionCheck(ctx, tx, second))
	got, err := appcheck.GetFunctionCheck(ctx, tx, tenant, "fn")
	require.NoError(t, err)
	require.True(t, second.CheckedAt.Equal(got.CheckedAt))
	got.CheckedAt = second.CheckedAt
	require.Equal(t, second, *got, "the last check replaces the one before")
	_, err = appcheck.GetFunctionCheck(ctx, tx, "another-tenant", "fn")
	require.ErrorIs(t, err, journal.ErrNotFound)
}

func TestAppCheckSlot(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	tenant, other := newTenant(), newTenant()
	at := time.Now().UTC().Truncate(time.Millisecond)
	first := appcheck.AppCheckSlot{ID: newID(), Tenant: tenant, Subject: "alice", App: "https://app.example/"}
	got, err := appcheck.StartAppCheck(ctx, tx, first, time.Minute, &at)
	require.NoError(t, err)
	require.True(t, at.Equal(got.StartedAt))

	second := appcheck.AppCheckSlot{ID: newID(), Tenant: tenant, Subject: "bob", App: "https://other.example/"}
	later := at.Add(59 * time.Second)
	_, err = appcheck.StartAppCheck(ctx, tx, second, time.Minute, &later)
	var running *appcheck.RunningCheckError
	require.ErrorAs(t, err, &running, "one check at a time per tenant")
	require.ErrorIs(t, err, journal.ErrConflict)
	require.Equal(t, first.ID, running.Running.ID)
	require.Equal(t, "alice", running.Running.Subject)
	require.Equal(t, "https://app.example/", running.Running.App)
	require.True(t, at.Equal(running.Running.StartedAt))

	_, err = appcheck.StartAppCheck(ctx, tx, appcheck.AppCheckSlot{ID: newID(), Tenant: other, Subject: "carol"}, time.Minute, &later)
	require.NoError(t, err, "another tenant's check runs beside it")

	require.NoError(t, appcheck.EndAppCheck(ctx, tx, tenant, second.ID), "ending another check's slot ends nothing")
	_, err = appcheck.StartAppCheck(ctx, tx, second, time.Minute, &later)
	require.ErrorAs(t, err, &running)

	expired := at.Add(time.Minute)
	got, err = appcheck.StartAppCheck(ctx, tx, second, time.Minute, &expired)
	require.NoError(t, err, "a slot held past its time (its gateway died) is taken over")
	require.True(t, expired.Equal(got.StartedAt))

	require.NoError(t, appcheck.EndAppCheck(ctx, tx, tenant, second.ID))
	third := appcheck.AppCheckSlot{ID: newID(), Tenant: tenant, Subject: "dave"}
	_, err = appcheck.StartAppCheck(ctx, tx, third, time.Minute, &expired)
	require.NoError(t, err, "an ended check frees the slot")
}
