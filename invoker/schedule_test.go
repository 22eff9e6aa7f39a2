package invoker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
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
	var sch *journal.Schedule
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sch, _, err = journal.PutSchedule(ctx, tx, journal.NewSchedule{
			ID: uuid.NewString(), Tenant: tenant, Name: "dup", Function: "hello", Cron: "@every 1s",
			Input: json.RawMessage(`{"name":"tick"}`), Identity: creator, Next: spec.Next,
		})
		if err != nil {
			return err
		}
		if err := s.Invoker.EnqueueTick(ctx, tx, sch); err != nil {
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
