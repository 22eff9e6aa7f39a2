package journal_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

// inAMinute is a schedule's Next: a minute after now, to the second.
func inAMinute(now time.Time) time.Time { return now.Add(time.Minute).Truncate(time.Second) }

func mustPutSchedule(t *testing.T, db journal.DB, tenant, name string, opts ...func(*schedule.NewSchedule)) *schedule.Schedule {
	t.Helper()
	n := schedule.NewSchedule{
		ID: newID(), Tenant: tenant, Name: name, Function: "fn", Cron: "@every 1m", Timezone: "UTC",
		Input: json.RawMessage(`{"n":1}`), Identity: journal.Identity{Subject: "creator", Tenant: tenant, Roles: []string{"developer"}},
		Next: inAMinute,
	}
	for _, o := range opts {
		o(&n)
	}
	s, _, err := schedule.PutSchedule(t.Context(), db, n)
	require.NoError(t, err)
	return s
}

func TestSchedules(t *testing.T) {
	t.Parallel()

	t.Run("PutGetListDelete", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		s, clock, err := schedule.PutSchedule(ctx, tx, schedule.NewSchedule{
			ID: newID(), Tenant: tenant, Name: "nightly", Function: "fn", Cron: "@every 1m", Timezone: "UTC",
			Input: json.RawMessage(`{"n":1}`), Identity: journal.Identity{Subject: "ada", Tenant: tenant, Roles: []string{"developer"}},
			Next: inAMinute,
		})
		require.NoError(t, err)
		require.Equal(t, 1, s.Generation)
		require.True(t, s.NextAt.Equal(inAMinute(clock)), "next_at %s from the database clock %s", s.NextAt, clock)
		require.Equal(t, "ada", s.Identity.Subject)
		require.JSONEq(t, `{"n":1}`, string(s.Input))

		got, err := schedule.GetSchedule(ctx, tx, tenant, "nightly")
		require.NoError(t, err)
		require.Equal(t, s.ID, got.ID)
		_, err = schedule.GetSchedule(ctx, tx, newTenant(), "nightly")
		require.ErrorIs(t, err, journal.ErrNotFound, "another tenant's")

		mustPutSchedule(t, tx, tenant, "hourly")
		list, err := schedule.ListSchedules(ctx, tx, tenant)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, []string{"hourly", "nightly"}, []string{list[0].Name, list[1].Name})

		require.ErrorIs(t, schedule.DeleteSchedule(ctx, tx, newTenant(), "nightly"), journal.ErrNotFound)
		require.NoError(t, schedule.DeleteSchedule(ctx, tx, tenant, "nightly"))
		require.ErrorIs(t, schedule.DeleteSchedule(ctx, tx, tenant, "nightly"), journal.ErrNotFound)
		_, err = schedule.GetSchedule(ctx, tx, tenant, "nightly")
		require.ErrorIs(t, err, journal.ErrNotFound)
	})

	t.Run("PutAgainReplacesAndBumpsTheGeneration", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		tenant := newTenant()
		first := mustPutSchedule(t, tx, tenant, "s")
		second := mustPutSchedule(t, tx, tenant, "s", func(n *schedule.NewSchedule) {
			n.Function, n.Cron, n.Input = "other", "@hourly", json.RawMessage(`2`)
			n.Identity = journal.Identity{Subject: "grace", Tenant: tenant}
		})
		require.Equal(t, first.ID, second.ID, "the schedule keeps its id")
		require.Equal(t, 2, second.Generation)
		require.Equal(t, "other", second.Function)
		require.Equal(t, "@hourly", second.Cron)
		require.Equal(t, "grace", second.Identity.Subject, "the runs carry the identity of the last put")
		require.True(t, second.CreatedAt.Equal(first.CreatedAt))
	})

	t.Run("ATickIsClaimedOnce", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		s := mustPutSchedule(t, tx, newTenant(), "s")
		claimed, clock, err := schedule.ClaimTick(ctx, tx, s.ID, s.Generation, s.NextAt)
		require.NoError(t, err)
		require.Equal(t, s.ID, claimed.ID)
		require.True(t, claimed.NextAt.After(clock), "not due yet: the caller checks")

		runID := newID()
		next := s.NextAt.Add(time.Minute)
		require.NoError(t, schedule.AdvanceSchedule(ctx, tx, s.ID, s.NextAt, &runID, next))
		_, _, err = schedule.ClaimTick(ctx, tx, s.ID, s.Generation, s.NextAt)
		require.ErrorIs(t, err, journal.ErrNotFound, "a tick handled already")
		_, _, err = schedule.ClaimTick(ctx, tx, s.ID, s.Generation+1, next)
		require.ErrorIs(t, err, journal.ErrNotFound, "another generation")
		after, _, err := schedule.ClaimTick(ctx, tx, s.ID, s.Generation, next)
		require.NoError(t, err)
		require.Equal(t, runID, *after.LastRunID)
		require.True(t, after.LastTickAt.Equal(s.NextAt))

		require.NoError(t, schedule.DeleteSchedule(ctx, tx, s.Tenant, s.Name))
		_, _, err = schedule.ClaimTick(ctx, tx, s.ID, s.Generation, next)
		require.ErrorIs(t, err, journal.ErrNotFound, "a deleted schedule")
	})

	t.Run("TwoClaimsOfOneTickAreSerialized", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := pgtest.DB(t)
		s := mustPutSchedule(t, db, newTenant(), "s")
		first, err := db.Begin(ctx)
		require.NoError(t, err)
		defer first.Rollback(ctx) //nolint:errcheck // a no-op once committed
		_, _, err = schedule.ClaimTick(ctx, first, s.ID, s.Generation, s.NextAt)
		require.NoError(t, err)

		second := make(chan error, 1)
		go func() {
			second <- pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				_, _, err := schedule.ClaimTick(ctx, tx, s.ID, s.Generation, s.NextAt)
				return err
			})
		}()
		require.NoError(t, schedule.AdvanceSchedule(ctx, first, s.ID, s.NextAt, nil, s.NextAt.Add(time.Minute)))
		require.NoError(t, first.Commit(ctx))
		require.ErrorIs(t, <-second, journal.ErrNotFound, "the second waited for the first and found the tick handled")
	})
}

// TestScheduleCatchup checks the catch-up policy a schedule stores, and the queries
// that find and claim its overdue ticks.
func TestScheduleCatchup(t *testing.T) {
	t.Parallel()

	t.Run("DefaultsAndBounds", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		s := mustPutSchedule(t, tx, tenant, "s")
		require.Equal(t, schedule.CatchupOne, s.Catchup)
		require.Equal(t, time.Minute, s.CatchupWindow)

		s = mustPutSchedule(t, tx, tenant, "s", func(n *schedule.NewSchedule) {
			n.Catchup, n.CatchupWindow = schedule.CatchupAll, 90*time.Second+250*time.Millisecond
		})
		require.Equal(t, schedule.CatchupAll, s.Catchup)
		require.Equal(t, 90*time.Second+250*time.Millisecond, s.CatchupWindow)
		got, err := schedule.GetSchedule(ctx, tx, tenant, "s")
		require.NoError(t, err)
		require.Equal(t, schedule.CatchupAll, got.Catchup)
		require.Equal(t, s.CatchupWindow, got.CatchupWindow)
		s = mustPutSchedule(t, tx, tenant, "s")
		require.Equal(t, schedule.CatchupOne, s.Catchup, "putting again replaces the policy")

		for _, n := range []schedule.NewSchedule{
			{Catchup: "sometimes"},
			{CatchupWindow: time.Second - time.Millisecond},
			{CatchupWindow: schedule.MaxCatchupWindow + time.Millisecond},
		} {
			err := pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
				_, _, err := schedule.PutSchedule(ctx, tx, schedule.NewSchedule{
					ID: newID(), Tenant: tenant, Name: "bad", Function: "fn", Cron: "@hourly", Timezone: "UTC",
					Input: json.RawMessage(`null`), Identity: journal.Identity{Tenant: tenant}, Next: inAMinute,
					Catchup: n.Catchup, CatchupWindow: n.CatchupWindow,
				})
				return err
			})
			requirePgError(t, err, "23514", "the schema's check")
		}
	})

	t.Run("OverdueTicks", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		tenant := newTenant()
		future := mustPutSchedule(t, tx, tenant, "future")
		late := mustPutSchedule(t, tx, tenant, "late")
		_, err := tx.Exec(ctx, `UPDATE stepgate.schedule SET next_at = now() - interval '1 hour' WHERE id = $1`, late.ID)
		require.NoError(t, err)
		late, err = schedule.GetSchedule(ctx, tx, tenant, "late")
		require.NoError(t, err)

		mine := func(ticks []schedule.Tick) []schedule.Tick {
			var out []schedule.Tick
			for _, tk := range ticks {
				if tk.ScheduleID == future.ID || tk.ScheduleID == late.ID {
					out = append(out, tk)
				}
			}
			return out
		}
		ticks, err := schedule.OverdueTicks(ctx, tx, time.Minute, 1000)
		require.NoError(t, err)
		ticks = mine(ticks)
		require.Len(t, ticks, 1, "only the overdue one")
		require.Equal(t, late.ID, ticks[0].ScheduleID)
		require.Equal(t, late.Generation, ticks[0].Generation)
		require.True(t, ticks[0].At.Equal(late.NextAt))

		ticks, err = schedule.OverdueTicks(ctx, tx, 2*time.Hour, 1000)
		require.NoError(t, err)
		require.Empty(t, mine(ticks), "overdue by less than late")
	})

	t.Run("TryClaimTickSkipsAHeldTick", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := pgtest.DB(t)
		s := mustPutSchedule(t, db, newTenant(), "s")
		first, err := db.Begin(ctx)
		require.NoError(t, err)
		defer first.Rollback(ctx) //nolint:errcheck // a no-op once rolled back
		_, _, err = schedule.ClaimTick(ctx, first, s.ID, s.Generation, s.NextAt)
		require.NoError(t, err)

		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, _, err := schedule.TryClaimTick(ctx, tx, s.ID, s.Generation, s.NextAt)
			return err
		})
		require.ErrorIs(t, err, journal.ErrNotFound, "held by the first: skipped, not waited for")
		require.NoError(t, first.Rollback(ctx))
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, _, err := schedule.TryClaimTick(ctx, tx, s.ID, s.Generation, s.NextAt)
			return err
		})
		require.NoError(t, err, "released")
	})
}

// TestSchedulesAreFenced checks row-level security on schedules: a tenant's handle sees
// and deletes only its own; the system pool (the tick worker) sees every tenant's.
func TestSchedulesAreFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	system, api := fencedPools(t, 2)
	a, b := newTenant(), newTenant()
	sa := mustPutSchedule(t, journal.ForTenant(api, a), a, "s")
	mustPutSchedule(t, journal.ForTenant(api, b), b, "s")

	db := journal.ForTenant(api, b)
	for _, tenant := range tenantsIn(t, db, `SELECT tenant FROM stepgate.schedule`) {
		require.Equal(t, b, *tenant, "a query that forgot the tenant filter")
	}
	_, err := schedule.GetSchedule(ctx, db, a, "s")
	require.ErrorIs(t, err, journal.ErrNotFound)
	require.ErrorIs(t, schedule.DeleteSchedule(ctx, db, a, "s"), journal.ErrNotFound)
	_, _, err = schedule.PutSchedule(ctx, db, schedule.NewSchedule{
		ID: newID(), Tenant: a, Name: "evil", Function: "fn", Cron: "@hourly", Timezone: "UTC",
		Input: json.RawMessage(`null`), Identity: journal.Identity{Tenant: a}, Next: inAMinute,
	})
	requirePgError(t, err, "42501", "a schedule for another tenant")
	require.Empty(t, tenantsIn(t, api, `SELECT tenant FROM stepgate.schedule`), "no tenant set")

	err = pgx.BeginFunc(ctx, system, func(tx pgx.Tx) error {
		_, _, err := schedule.ClaimTick(ctx, tx, sa.ID, sa.Generation, sa.NextAt)
		return err
	})
	require.NoError(t, err, "the system pool claims any tenant's tick")
}
