package invoker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

func TestParseCron(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		expr, timezone string
		after, next    string
	}{
		{"*/5 * * * *", "", "2026-03-01T10:02:30Z", "2026-03-01T10:05:00Z"},
		{"0 9 * * MON-FRI", "UTC", "2026-03-06T09:00:00Z", "2026-03-09T09:00:00Z"}, // Friday, then Monday
		{"0 9 * * *", "Europe/Paris", "2026-03-01T10:00:00Z", "2026-03-02T08:00:00Z"},
		{"@hourly", "", "2026-03-01T10:02:30Z", "2026-03-01T11:00:00Z"},
		{"@daily", "America/New_York", "2026-03-01T10:00:00Z", "2026-03-02T05:00:00Z"},
		{"@every 1m", "", "2026-03-01T10:02:30.5Z", "2026-03-01T10:03:30Z"},
		{"@every 1s", "", "2026-03-01T10:02:30Z", "2026-03-01T10:02:31Z"},
	} {
		c, err := invoker.ParseCron(tc.expr, tc.timezone)
		require.NoError(t, err, tc.expr)
		next := c.Next(at(tc.after))
		require.Equal(t, at(tc.next), next, "%s in %q after %s", tc.expr, tc.timezone, tc.after)
		require.Equal(t, time.UTC, next.Location())
	}

	for _, tc := range []struct{ expr, timezone, err string }{
		{"", "", `cron is empty: want five fields ("*/5 * * * *") or a descriptor ("@hourly", "@every 1m")`},
		{"* * *", "", `cron "* * *": expected exactly 5 fields, found 3: [* * *]`},
		{"0 0 * * * *", "", `cron "0 0 * * * *": expected exactly 5 fields, found 6: [0 0 * * * *]`},
		{"61 * * * *", "", `cron "61 * * * *": end of range (61) above maximum (59): 61`},
		{"@sometimes", "", `cron "@sometimes": unrecognized descriptor: @sometimes`},
		{"@every 500ms", "", `cron "@every 500ms": @every takes a whole number of seconds, at least 1s`},
		{"@every 1.5s", "", `cron "@every 1.5s": @every takes a whole number of seconds, at least 1s`},
		{"@every soon", "", `cron "@every soon": failed to parse duration @every soon: time: invalid duration "soon"`},
		{"0 0 30 2 *", "", `cron "0 0 30 2 *" never fires`},
		{"CRON_TZ=Europe/Paris 0 9 * * *", "", `cron "CRON_TZ=Europe/Paris 0 9 * * *": set the time zone with timezone, not in the expression`},
		{"TZ=UTC", "", `cron "TZ=UTC": set the time zone with timezone, not in the expression`},
		{"@hourly", "Mars/Olympus", `timezone "Mars/Olympus" is not an IANA time zone such as UTC or Europe/Paris`},
		{"@hourly", "Local", `timezone "Local" is not an IANA time zone such as UTC or Europe/Paris`},
	} {
		_, err := invoker.ParseCron(tc.expr, tc.timezone)
		require.EqualError(t, err, tc.err, "%q in %q", tc.expr, tc.timezone)
	}
}

// TestTickStartsOneRun checks that a tick whose River job runs several times at once
// starts one run, and that the ticks go on, each with its own idempotency key, as the
// identity stored with the schedule.
func TestTickStartsOneRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	tenant := "default"
	creator := journal.Identity{Subject: "scheduler", Tenant: tenant, Roles: []string{"developer"}}

	spec, err := invoker.ParseCron("@every 1s", "")
	require.NoError(t, err)
	var sch *schedule.Schedule
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sch, _, err = schedule.PutSchedule(ctx, tx, schedule.NewSchedule{
			ID: uuid.NewString(), Tenant: tenant, Name: "dup", Function: "hello", Cron: "@every 1s",
			Input: json.RawMessage(`{"name":"tick"}`), Identity: creator, Next: spec.Next,
		})
		if err != nil {
			return err
		}
		if err := s.Invoker.Schedules().EnqueueTick(ctx, tx, sch); err != nil {
			return err
		}
		// The same tick's job twice more, not unique and available at once: three
		// jobs race for the first tick.
		args := invoker.TickArgs{ScheduleID: sch.ID, Generation: sch.Generation, At: sch.NextAt}
		for range 2 {
			if _, err := s.Invoker.River().InsertTx(ctx, tx, args, &river.InsertOpts{ScheduledAt: time.Now().Add(-time.Second)}); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)

	first := sch.NextAt.UTC()
	var runs []scheduledRun
	awaitCondition(t, 15*time.Second, func() bool {
		// The first tick's three jobs have all run, and two more ticks have started.
		var pending int
		require.NoError(t, s.Pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE state <> 'completed') FROM river_job
			WHERE kind = 'stepgate.schedule_tick' AND args->>'at' = $1`,
			first.Format(time.RFC3339Nano)).Scan(&pending))
		runs = scheduledRuns(t, s, tenant, "schedule:dup:")
		return pending == 0 && len(runs) >= 3
	}, "the first tick's jobs to run and three ticks to start runs")
	keys := map[string]int{}
	for _, r := range runs {
		keys[r.key]++
		require.Equal(t, creator.Subject, r.identity.Subject)
		require.Equal(t, creator.Roles, r.identity.Roles)
	}
	for key, n := range keys {
		require.Equal(t, 1, n, "tick %s started %d runs", key, n)
	}
	require.Contains(t, keys, "schedule:dup:"+first.Format(time.RFC3339), "the first tick, raced by three jobs")
}

type scheduledRun struct {
	key      string
	identity journal.Identity
}

// scheduledRuns returns the tenant's runs whose idempotency key starts with prefix,
// oldest first.
func scheduledRuns(t *testing.T, s *stack.Stack, tenant, prefix string) []scheduledRun {
	t.Helper()
	rows, _ := s.Pool.Query(t.Context(), `
		SELECT idempotency_key, identity FROM stepgate.run
		WHERE tenant = $1 AND starts_with(idempotency_key, $2) ORDER BY created_at`, tenant, prefix)
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduledRun, error) {
		var r scheduledRun
		err := row.Scan(&r.key, &r.identity)
		return r, err
	})
	require.NoError(t, err)
	return runs
}

// awaitCondition checks cond every 50ms until it holds, failing the test after within.
func awaitCondition(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("no %s after %s", what, within)
		}
	}
}

// TestCatchupTicks checks which ticks a late handling starts runs for, under each
// policy, and that it stays bounded however long the schedule was down.
func TestCatchupTicks(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return v
	}
	// minutes returns the ticks of a minutely cron from first to last.
	minutes := func(first, last string) []time.Time {
		var ts []time.Time
		for tk := at(first); !tk.After(at(last)); tk = tk.Add(time.Minute) {
			ts = append(ts, tk)
		}
		return ts
	}
	every := func(first time.Time, n int, d time.Duration) []time.Time {
		ts := make([]time.Time, n)
		for i := range ts {
			ts[i] = first.Add(time.Duration(i) * d)
		}
		return ts
	}
	for _, tc := range []struct {
		name            string
		cron            string
		at, clock       string
		policy          schedule.Catchup
		window          time.Duration
		ticks           []time.Time
		missed, dropped bool
	}{
		{"OnTimeOne", "* * * * *", "2026-03-01T10:00:00Z", "2026-03-01T10:00:00.2Z", schedule.CatchupOne, time.Minute,
			minutes("2026-03-01T10:00:00Z", "2026-03-01T10:00:00Z"), false, false},
		// A leader change of 19s with @every 1s loses no tick, whatever the policy.
		{"LeaderChangeSkip", "@every 1s", "2026-03-01T10:00:00Z", "2026-03-01T10:00:19.5Z", schedule.CatchupSkip, time.Minute,
			every(at("2026-03-01T10:00:00Z"), 20, time.Second), false, false},
		{"WindowEdgeIsOnTime", "* * * * *", "2026-03-01T10:00:00Z", "2026-03-01T10:01:00Z", schedule.CatchupSkip, time.Minute,
			minutes("2026-03-01T10:00:00Z", "2026-03-01T10:01:00Z"), false, false},
		{"Skip", "* * * * *", "2026-03-01T10:00:00Z", "2026-03-01T10:10:30Z", schedule.CatchupSkip, time.Minute,
			minutes("2026-03-01T10:10:00Z", "2026-03-01T10:10:00Z"), true, false},
		{"SkipNothingOnTime", "0 * * * *", "2026-03-01T10:00:00Z", "2026-03-01T13:30:00Z", schedule.CatchupSkip, time.Minute,
			nil, true, false},
		{"One", "* * * * *", "2026-03-01T10:00:00Z", "2026-03-01T10:10:30Z", schedule.CatchupOne, 2 * time.Minute,
			append(minutes("2026-03-01T10:00:00Z", "2026-03-01T10:00:00Z"), minutes("2026-03-01T10:09:00Z", "2026-03-01T10:10:00Z")...), true, false},
		{"All", "* * * * *", "2026-03-01T10:00:00Z", "2026-03-01T10:10:30Z", schedule.CatchupAll, time.Minute,
			minutes("2026-03-01T10:00:00Z", "2026-03-01T10:10:00Z"), true, false},
		{"AllKeepsTheLatest100", "* * * * *", "2026-03-01T10:00:00Z", "2026-03-01T15:00:30Z", schedule.CatchupAll, time.Minute,
			minutes("2026-03-01T13:20:00Z", "2026-03-01T15:00:00Z"), true, true},
		// A year down: the walk starts near the end, not at the first missed tick.
		{"AllAfterAYear", "* * * * *", "2025-03-01T10:00:00Z", "2026-03-01T10:00:30Z", schedule.CatchupAll, time.Minute,
			minutes("2026-03-01T08:20:00Z", "2026-03-01T10:00:00Z"), true, true},
		{"OneAfterAYear", "@every 1s", "2025-03-01T10:00:00Z", "2026-03-01T10:00:30.5Z", schedule.CatchupOne, 2 * time.Second,
			append([]time.Time{at("2025-03-01T10:00:00Z")}, every(at("2026-03-01T10:00:29Z"), 2, time.Second)...), true, false},
		// At most 1000 runs a handling: the latest.
		{"OnTimeCapped", "@every 1s", "2026-03-01T10:00:00Z", "2026-03-01T11:00:00.5Z", schedule.CatchupSkip, 24 * time.Hour,
			every(at("2026-03-01T10:43:21Z"), 1000, time.Second), false, true},
		{"AllCapped", "@every 1s", "2025-03-01T10:00:00Z", "2026-03-01T10:00:00.5Z", schedule.CatchupAll, 24 * time.Hour,
			nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := invoker.ParseCron(tc.cron, "")
			require.NoError(t, err)
			ticks, missed, dropped := c.Due(at(tc.at), at(tc.clock), tc.policy, tc.window)
			require.Equal(t, tc.missed, missed, "missed")
			require.Equal(t, tc.dropped, dropped, "dropped")
			if tc.name == "AllCapped" {
				// The latest 100 missed ticks, then the latest 900 on-time ones.
				require.Len(t, ticks, 1000)
				edge := at(tc.clock).Add(-tc.window)
				require.Equal(t, every(edge.Truncate(time.Second).Add(-99*time.Second), 100, time.Second), ticks[:100])
				require.Equal(t, every(at(tc.clock).Truncate(time.Second).Add(-899*time.Second), 900, time.Second), ticks[100:])
				return
			}
			require.Equal(t, tc.ticks, ticks)
		})
	}
}

// putOverdue puts, with the system pool, a schedule of hello that ticks daily half an
// hour from now (database clock), and moves its next tick back by days: it has ticks
// due from days days ago to yesterday, the latest 23.5 hours ago. It returns the
// schedule and its next tick after those, today's.
func putOverdue(t *testing.T, s *stack.Stack, name string, days int, catchup schedule.Catchup, window time.Duration) (*schedule.Schedule, time.Time) {
	t.Helper()
	ctx := t.Context()
	var today time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT date_trunc('minute', now()) + interval '30 minutes'`).Scan(&today))
	today = today.UTC()
	expr := fmt.Sprintf("%d %d * * *", today.Minute(), today.Hour())
	spec, err := invoker.ParseCron(expr, "")
	require.NoError(t, err)
	sch, _, err := schedule.PutSchedule(ctx, s.Pool, schedule.NewSchedule{
		ID: uuid.NewString(), Tenant: "default", Name: name, Function: "hello", Cron: expr, Timezone: "UTC",
		Input: json.RawMessage(`{"name":"tick"}`), Identity: journal.Identity{Subject: "scheduler", Tenant: "default", Roles: []string{"developer"}},
		Catchup: catchup, CatchupWindow: window, Next: spec.Next,
	})
	require.NoError(t, err)
	require.True(t, sch.NextAt.Equal(today), "next tick %s, want %s", sch.NextAt, today)
	sch.NextAt = today.AddDate(0, 0, -days)
	_, err = s.Pool.Exec(ctx, `UPDATE stepgate.schedule SET next_at = $2 WHERE id = $1`, sch.ID, sch.NextAt)
	require.NoError(t, err)
	return sch, today
}

// tickKeys returns the idempotency keys of the runs of schedule name's ticks, days
// days before today.
func tickKeys(name string, today time.Time, days ...int) []string {
	keys := make([]string, 0, len(days))
	for _, d := range days {
		keys = append(keys, "schedule:"+name+":"+today.AddDate(0, 0, -d).Format(time.RFC3339))
	}
	return keys
}

// runKeys returns the idempotency keys of the runs schedule name started, sorted (by
// tick).
func runKeys(t *testing.T, s *stack.Stack, name string) []string {
	t.Helper()
	keys := []string{}
	for _, r := range scheduledRuns(t, s, "default", "schedule:"+name+":") {
		keys = append(keys, r.key)
	}
	slices.Sort(keys)
	return keys
}

// requireHandled checks that schedule name's ticks were handled: its next tick is
// today's, its last tick is last and its last run that of last, if any.
func requireHandled(t *testing.T, s *stack.Stack, name string, today, last time.Time, started bool) {
	t.Helper()
	sch, err := schedule.GetSchedule(t.Context(), s.Pool, "default", name)
	require.NoError(t, err)
	require.True(t, sch.NextAt.Equal(today), "next tick %s, want today's %s", sch.NextAt, today)
	require.NotNil(t, sch.LastTickAt)
	require.True(t, sch.LastTickAt.Equal(last), "last tick %s, want %s", sch.LastTickAt, last)
	require.Equal(t, started, sch.LastRunID != nil, "last run %v", sch.LastRunID)
}

// TestCatchupPolicies checks what the ticks of a schedule that every gateway missed
// start under each catch-up policy, handled by TickOverdue.
func TestCatchupPolicies(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{MaintainInterval: time.Hour}) // no maintenance pass meanwhile
	s.SyncExamples(t)
	for _, tc := range []struct {
		name    string
		days    int
		catchup schedule.Catchup
		window  time.Duration
		started []int // the ticks, in days before today, that start runs
	}{
		{"skip", 5, schedule.CatchupSkip, time.Minute, nil},
		{"one", 5, schedule.CatchupOne, time.Minute, []int{5}},
		{"all", 5, schedule.CatchupAll, time.Minute, []int{5, 4, 3, 2, 1}},
		{"all-capped", 150, schedule.CatchupAll, time.Minute, func() []int {
			var days []int
			for d := 100; d >= 1; d-- {
				days = append(days, d)
			}
			return days
		}()},
		// Yesterday's tick, 23.5h ago, is within a window of a day: on time, it starts its
		// run under skip as under any policy.
		{"skip-on-time", 3, schedule.CatchupSkip, 24 * time.Hour, []int{1}},
		{"one-on-time", 3, schedule.CatchupOne, 24 * time.Hour, []int{3, 1}},
		{"default", 2, "", 0, []int{2}},
	} {
		// One after another: TickOverdue handles every overdue schedule, so a parallel
		// subtest's call could take this one's, and commit after this one looks.
		t.Run(tc.name, func(t *testing.T) {
			sch, today := putOverdue(t, s, tc.name, tc.days, tc.catchup, tc.window)
			_, err := s.Invoker.Schedules().TickOverdue(t.Context(), 0, 100)
			require.NoError(t, err)

			require.Equal(t, tickKeys(tc.name, today, tc.started...), runKeys(t, s, tc.name))
			last := sch.NextAt
			if len(tc.started) > 0 {
				last = today.AddDate(0, 0, -tc.started[len(tc.started)-1])
			}
			requireHandled(t, s, tc.name, today, last, len(tc.started) > 0)

			// Handled again, the same ticks start nothing more.
			again := invoker.TickArgs{ScheduleID: sch.ID, Generation: sch.Generation, At: sch.NextAt}
			_, err = s.Invoker.River().Insert(t.Context(), again, nil)
			require.NoError(t, err)
			awaitCondition(t, 10*time.Second, func() bool {
				var pending int
				require.NoError(t, s.Pool.QueryRow(t.Context(), `
					SELECT count(*) FROM river_job WHERE kind = 'stepgate.schedule_tick'
					AND args->>'schedule_id' = $1 AND finalized_at IS NULL AND scheduled_at <= now()`, sch.ID).Scan(&pending))
				return pending == 0
			}, "run of the repeated tick's job")
			require.Equal(t, tickKeys(tc.name, today, tc.started...), runKeys(t, s, tc.name))
		})
	}
}

// TestTickOverdue checks that TickOverdue takes only the ticks overdue by more than
// late, and that two gateways calling it at once handle each tick once.
func TestTickOverdue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := stack.Start(t, stack.Options{MaintainInterval: time.Hour}) // no maintenance pass meanwhile
	s.SyncExamples(t)

	future, today := putOverdue(t, s, "future", 0, schedule.CatchupAll, time.Minute)
	overdue, _ := putOverdue(t, s, "overdue", 1, schedule.CatchupAll, time.Minute) // 23.5h overdue
	n, err := s.Invoker.Schedules().TickOverdue(ctx, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n, "not overdue by a day")
	n, err = s.Invoker.Schedules().TickOverdue(ctx, time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, tickKeys("overdue", today, 1), runKeys(t, s, "overdue"))
	requireHandled(t, s, "overdue", today, overdue.NextAt, true)
	got, err := schedule.GetSchedule(ctx, s.Pool, "default", "future")
	require.NoError(t, err)
	require.True(t, got.NextAt.Equal(future.NextAt), "a tick not due is left alone")
	require.Nil(t, got.LastTickAt)
	require.Empty(t, runKeys(t, s, "future"))

	t.Run("TwoCallersAtOnce", func(t *testing.T) {
		names := []string{"a", "b", "c", "d", "e", "f"}
		for _, name := range names {
			putOverdue(t, s, name, 3, schedule.CatchupAll, time.Minute)
		}
		start := make(chan struct{})
		type result struct {
			n   int
			err error
		}
		results := make(chan result, 2)
		for range 2 {
			go func() {
				<-start
				n, err := s.Invoker.Schedules().TickOverdue(context.WithoutCancel(ctx), 0, 100)
				results <- result{n, err}
			}()
		}
		close(start)
		handled := 0
		for range 2 {
			select {
			case r := <-results:
				require.NoError(t, r.err)
				handled += r.n
			case <-time.After(time.Minute):
				t.Fatal("TickOverdue did not return")
			}
		}
		require.Equal(t, len(names), handled, "each schedule handled once between the two")
		for _, name := range names {
			require.Equal(t, tickKeys(name, today, 3, 2, 1), runKeys(t, s, name), "schedule %s", name)
			requireHandled(t, s, name, today, today.AddDate(0, 0, -1), true)
		}
	})
}
