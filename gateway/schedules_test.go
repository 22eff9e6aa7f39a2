package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
	"github.com/stepgate/stepgate/protocol"
)

// seenRuns records what a function was invoked with: each run's identity, by run id.
type seenRuns struct {
	mu  sync.Mutex
	ids map[string]protocol.Identity
}

func (r *seenRuns) get(runID string) (protocol.Identity, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ids[runID]
	return id, ok
}

// serveHello registers, for the tenant of token, a function "hello" that records the
// identity it is invoked with.
func serveHello(t *testing.T, s *stack.Stack, token string) *seenRuns {
	t.Helper()
	seen := &seenRuns{ids: map[string]protocol.Identity{}}
	app := s.NewApp()
	functions.Register(app, "hello", func(ctx context.Context, in json.RawMessage) (string, error) {
		seen.mu.Lock()
		seen.ids[functions.RunFrom(ctx).ID] = protocol.Identity(functions.IdentityFrom(ctx))
		seen.mu.Unlock()
		return "hi", nil
	})
	resp, err := s.Client(t, token).SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return seen
}

func putSchedule(t *testing.T, c *protocol.ClientWithResponses, name string, spec protocol.ScheduleSpec) *protocol.PutScheduleResponse {
	t.Helper()
	resp, err := c.PutScheduleWithResponse(t.Context(), name, spec)
	require.NoError(t, err)
	return resp
}

// tickRun is a run a schedule started.
type tickRun struct {
	ID       string           `db:"id"`
	Key      string           `db:"idempotency_key"`
	Identity journal.Identity `db:"identity"`
	Input    json.RawMessage  `db:"input"`
}

// tickRuns returns the runs the tenant's schedule started, oldest first.
func tickRuns(t *testing.T, s *stack.Stack, tenant, schedule string) []tickRun {
	t.Helper()
	rows, _ := s.Pool.Query(t.Context(), `
		SELECT id, idempotency_key, identity, input FROM stepgate.run
		WHERE tenant = $1 AND starts_with(idempotency_key, $2) ORDER BY created_at`, tenant, "schedule:"+schedule+":")
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByName[tickRun])
	require.NoError(t, err)
	return runs
}

// eventually checks cond every 50ms until it holds, failing the test after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("still no %s after %s", what, within)
		}
	}
}

// requireOneRunPerTick checks that runs have distinct keys, each a tick of schedule
// (RFC 3339, whole seconds), in increasing order.
func requireOneRunPerTick(t *testing.T, schedule string, runs []tickRun) {
	t.Helper()
	var last time.Time
	seen := map[string]bool{}
	for _, r := range runs {
		require.False(t, seen[r.Key], "two runs for the tick %s", r.Key)
		seen[r.Key] = true
		tick, err := time.Parse(time.RFC3339, r.Key[len("schedule:"+schedule+":"):])
		require.NoError(t, err, r.Key)
		require.True(t, tick.After(last), "ticks in order: %s after %s", tick, last)
		last = tick
	}
}

// TestScheduleTicks checks that a schedule starts runs on its ticks as its creator,
// that the function sees that identity, and that deleting the schedule stops them.
func TestScheduleTicks(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	creator := auth.Identity{Subject: "ada", Tenant: "acme", Roles: []string{"developer"}}
	token := s.NewToken(t, creator)
	seen := serveHello(t, s, token)
	c := s.Client(t, token)

	before := time.Now()
	resp := putSchedule(t, c, "every-second", protocol.ScheduleSpec{Function: "hello", Cron: "@every 1s", Input: ptr(protocol.AnyJSON(`{"n":1}`))})
	after := time.Now()
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	sch := resp.JSON200
	require.Equal(t, "every-second", sch.Name)
	require.Equal(t, "UTC", sch.Timezone)
	require.Equal(t, protocol.Identity{Subject: "ada", Tenant: "acme", Roles: []string{"developer"}}, sch.Identity)
	require.JSONEq(t, `{"n":1}`, string(sch.Input))
	// The first tick after the database clock at the put (this machine's clock, here).
	require.True(t, sch.NextAt.After(before.Add(-time.Second)) && !sch.NextAt.After(after.Add(time.Second)),
		"next_at %s is not a second after the put (%s to %s)", sch.NextAt, before, after)

	var runs []tickRun
	eventually(t, 10*time.Second, "three ticks run by the function", func() bool {
		runs = tickRuns(t, s, "acme", "every-second")
		done := 0
		for _, r := range runs {
			if _, ok := seen.get(r.ID); ok {
				done++
			}
		}
		return done >= 3
	})
	requireOneRunPerTick(t, "every-second", runs)
	for _, r := range runs {
		require.Equal(t, journal.Identity{Subject: "ada", Tenant: "acme", Roles: []string{"developer"}}, r.Identity)
		require.JSONEq(t, `{"n":1}`, string(r.Input))
		if id, ok := seen.get(r.ID); ok {
			require.Equal(t, sch.Identity, id, "the function sees the schedule's creator")
		}
	}
	run := getRun(t, c, runs[0].ID)
	require.Equal(t, "ada", run.Identity.Subject)
	require.Equal(t, runs[0].Key, *run.IdempotencyKey)

	got, err := c.GetScheduleWithResponse(t.Context(), "every-second")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.StatusCode(), string(got.Body))
	require.NotNil(t, got.JSON200.LastTickAt)
	require.True(t, got.JSON200.NextAt.After(*got.JSON200.LastTickAt))

	t.Run("DeleteStopsTheTicks", func(t *testing.T) {
		var scheduleID string
		require.NoError(t, s.Pool.QueryRow(t.Context(),
			`SELECT id FROM stepgate.schedule WHERE tenant = 'acme' AND name = 'every-second'`).Scan(&scheduleID))
		del, err := c.DeleteScheduleWithResponse(t.Context(), "every-second")
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, del.StatusCode(), string(del.Body))

		// The tick pending at the delete has a River job: once every tick job has run,
		// the last one has found the schedule gone.
		var ticks []time.Time
		eventually(t, 10*time.Second, "run of the pending tick's job", func() bool {
			var pending int
			require.NoError(t, s.Pool.QueryRow(t.Context(), `
				SELECT count(*) FILTER (WHERE state <> 'completed'),
					array_agg(DISTINCT (args->>'at')::timestamptz ORDER BY (args->>'at')::timestamptz)
				FROM river_job WHERE kind = 'stepgate.schedule_tick' AND args->>'schedule_id' = $1`,
				scheduleID).Scan(&pending, &ticks))
			return pending == 0
		})
		last := ticks[len(ticks)-1]
		runs := tickRuns(t, s, "acme", "every-second")
		requireOneRunPerTick(t, "every-second", runs)
		require.Len(t, runs, len(ticks)-1, "every tick but the one pending at the delete started a run")
		for _, r := range runs {
			require.NotEqual(t, "schedule:every-second:"+last.UTC().Format(time.RFC3339), r.Key)
		}
		got, err := c.GetScheduleWithResponse(t.Context(), "every-second")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, got.StatusCode())
	})
}

// TestScheduleOnTwoGateways checks guarantee 5: with two gateways on one database, both
// racing for the same ticks, each tick starts one run.
func TestScheduleOnTwoGateways(t *testing.T) {
	t.Parallel()
	url := pgtest.DBURL(t)
	a := stack.Start(t, stack.Options{DatabaseURL: url})
	b := stack.Start(t, stack.Options{DatabaseURL: url})
	serveHello(t, a, a.Token)

	resp := putSchedule(t, a.Client(t, a.Token), "both", protocol.ScheduleSpec{Function: "hello", Cron: "@every 1s"})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	// Gateway a armed its timer for the first tick; arm b's for the same tick, so the
	// two race for it as their River jobs race for every tick.
	sch, err := schedule.GetSchedule(t.Context(), b.Pool, auth.DefaultTenant, "both")
	require.NoError(t, err)
	b.Invoker.Schedules().ArmTick(sch, time.Until(sch.NextAt))

	var runs []tickRun
	eventually(t, 10*time.Second, "three ticks", func() bool {
		runs = tickRuns(t, a, auth.DefaultTenant, "both")
		return len(runs) >= 3
	})
	requireOneRunPerTick(t, "both", runs)
	require.Equal(t, "schedule:both:"+sch.NextAt.UTC().Format(time.RFC3339), runs[0].Key, "the raced first tick")
}

// TestScheduleRequests checks validation, permissions and tenant isolation.
func TestScheduleRequests(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	admin := s.Client(t, s.Token)
	resp := putSchedule(t, admin, "nightly", protocol.ScheduleSpec{Function: "hello", Cron: "0 3 * * *", Timezone: ptr("Europe/Paris")})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, "Europe/Paris", resp.JSON200.Timezone)
	require.JSONEq(t, `null`, string(resp.JSON200.Input))
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	next := resp.JSON200.NextAt.In(paris)
	require.Equal(t, []int{3, 0, 0}, []int{next.Hour(), next.Minute(), next.Second()}, "03:00 in Paris: %s", next)
	require.Equal(t, protocol.ScheduleCatchupOne, resp.JSON200.Catchup, "the default")
	require.Equal(t, "1m", resp.JSON200.CatchupWindow, "the default")

	t.Run("Catchup", func(t *testing.T) {
		t.Parallel()
		resp := putSchedule(t, admin, "catchup", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly",
			Catchup: ptr(protocol.ScheduleCatchupAll), CatchupWindow: ptr("1h30m")})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.ScheduleCatchupAll, resp.JSON200.Catchup)
		require.Equal(t, "1h30m", resp.JSON200.CatchupWindow)
		got, err := admin.GetScheduleWithResponse(t.Context(), "catchup")
		require.NoError(t, err)
		require.Equal(t, protocol.ScheduleCatchupAll, got.JSON200.Catchup)
		require.Equal(t, "1h30m", got.JSON200.CatchupWindow)

		resp = putSchedule(t, admin, "catchup", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", Catchup: ptr(protocol.ScheduleCatchupSkip)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.ScheduleCatchupSkip, resp.JSON200.Catchup)
		require.Equal(t, "1m", resp.JSON200.CatchupWindow, "putting again replaces the window too")
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name   string
			spec   protocol.ScheduleSpec
			detail string
		}{
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "* * *"}, `cron "* * *": expected exactly 5 fields, found 3: [* * *]`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "99 * * * *"}, `cron "99 * * * *": end of range (99) above maximum (59): 99`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@every 10ms"}, `cron "@every 10ms": @every takes a whole number of seconds, at least 1s`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", Timezone: ptr("Nowhere/Land")}, `timezone "Nowhere/Land" is not an IANA time zone such as UTC or Europe/Paris`},
			{"x", protocol.ScheduleSpec{Function: "nope", Cron: "@hourly"}, `function "nope" is not registered`},
			{"x", protocol.ScheduleSpec{Cron: "@hourly"}, `function is required: the function each tick starts a run of`},
			{"-x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly"}, `schedule name "-x" is invalid: use 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", Catchup: ptr(protocol.ScheduleCatchup("sometimes"))}, `catchup "sometimes" is not skip, one or all`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", CatchupWindow: ptr("0s")}, `catchup_window 0s is not between 1s and 24h`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", CatchupWindow: ptr("48h")}, `catchup_window 48h is not between 1s and 24h`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", CatchupWindow: ptr("-1m")}, `catchup_window -1m is not between 1s and 24h`},
			{"x", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", CatchupWindow: ptr("soon")}, `catchup_window "soon" is not a duration such as 1m`},
		} {
			resp := putSchedule(t, admin, tc.name, tc.spec)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			require.Equal(t, tc.detail, resp.ApplicationProblemJSON400.Detail)
		}
		got, err := admin.GetScheduleWithResponse(t.Context(), "x")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, got.StatusCode(), "nothing stored")
	})

	t.Run("Permissions", func(t *testing.T) {
		t.Parallel()
		spec := protocol.ScheduleSpec{Function: "hello", Cron: "@hourly"}
		for _, tc := range []struct {
			roles  []string
			detail string
		}{
			{[]string{"viewer"}, "this operation needs the functions:write permission; the token's roles (viewer) do not grant it"},
			{[]string{"operator"}, "this operation needs the functions:write permission; the token's roles (operator) do not grant it"},
			{[]string{"functions:write"}, "a schedule's runs act as its creator, so putting one needs the runs:invoke permission too; the token's roles (functions:write) do not grant it"},
		} {
			c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "u", Tenant: auth.DefaultTenant, Roles: tc.roles}))
			resp := putSchedule(t, c, "denied", spec)
			require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
			require.Equal(t, tc.detail, resp.ApplicationProblemJSON403.Detail)
		}
		viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "v", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}}))
		list, err := viewer.ListSchedulesWithResponse(t.Context())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), "a viewer reads schedules")
		del, err := viewer.DeleteScheduleWithResponse(t.Context(), "nightly")
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, del.StatusCode())

		// A function's invoke_roles bind its schedules' creators too.
		reg, err := admin.RegisterFunctionWithResponse(t.Context(), "payout", protocol.FunctionRegistration{
			URL: "http://127.0.0.1:9/payout", Config: &protocol.FunctionConfig{InvokeRoles: &[]string{"billing"}}})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
		dev := s.Client(t, s.NewToken(t, auth.Identity{Subject: "d", Tenant: auth.DefaultTenant, Roles: []string{"developer"}}))
		resp := putSchedule(t, dev, "payouts", protocol.ScheduleSpec{Function: "payout", Cron: "@daily"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON403.Detail, "function payout may be invoked only by the roles (billing) or admin")
		billing := s.Client(t, s.NewToken(t, auth.Identity{Subject: "b", Tenant: auth.DefaultTenant, Roles: []string{"developer", "billing"}}))
		resp = putSchedule(t, billing, "payouts", protocol.ScheduleSpec{Function: "payout", Cron: "@daily"})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	})

	t.Run("OtherTenants", func(t *testing.T) {
		t.Parallel()
		other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))
		got, err := other.GetScheduleWithResponse(t.Context(), "nightly")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, got.StatusCode())
		require.Equal(t, `schedule "nightly" does not exist`, got.ApplicationProblemJSON404.Detail)
		del, err := other.DeleteScheduleWithResponse(t.Context(), "nightly")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, del.StatusCode())
		list, err := other.ListSchedulesWithResponse(t.Context())
		require.NoError(t, err)
		require.Empty(t, list.JSON200.Schedules)
		// Its own schedule of the same name is another schedule, on its own functions.
		resp := putSchedule(t, other, "nightly", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly"})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), "tenant other has no function hello")

		got, err = admin.GetScheduleWithResponse(t.Context(), "nightly")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, got.StatusCode(), "still there for its tenant")
	})

	t.Run("PutAgainReplaces", func(t *testing.T) {
		t.Parallel()
		first := putSchedule(t, admin, "replaced", protocol.ScheduleSpec{Function: "hello", Cron: "@daily"})
		require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
		dev := s.Client(t, s.NewToken(t, auth.Identity{Subject: "grace", Tenant: auth.DefaultTenant, Roles: []string{"developer"}}))
		second := putSchedule(t, dev, "replaced", protocol.ScheduleSpec{Function: "hello", Cron: "@hourly", Input: ptr(protocol.AnyJSON(`[1]`))})
		require.Equal(t, http.StatusOK, second.StatusCode(), string(second.Body))
		require.Equal(t, "@hourly", second.JSON200.Cron)
		require.Equal(t, "grace", second.JSON200.Identity.Subject, "the runs act as whoever put it last")
		require.True(t, second.JSON200.CreatedAt.Equal(first.JSON200.CreatedAt))
		require.True(t, second.JSON200.NextAt.Before(first.JSON200.NextAt) || second.JSON200.NextAt.Equal(first.JSON200.NextAt))
	})
}
