package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// flowInput is the input of the flow-control tests' functions.
type flowInput struct {
	Customer string `json:"customer"`
	N        int    `json:"n"`
}

// echoFlow answers its input, after one step, and counts its invocations.
func echoFlow(calls *atomic.Int32) func(ctx context.Context, in flowInput) (flowInput, error) {
	return func(ctx context.Context, in flowInput) (flowInput, error) {
		calls.Add(1)
		return step.Run(ctx, "echo", func(context.Context) (flowInput, error) { return in, nil })
	}
}

// startFlow starts name with input, with params (nil: no wait), and returns the answer.
func startFlow(t *testing.T, c *protocol.ClientWithResponses, name, input string, params *protocol.StartRunParams) *protocol.StartRunResponse {
	t.Helper()
	if params == nil {
		params = &protocol.StartRunParams{}
	}
	return startRun(t, c, name, input, params)
}

// accepted returns the id of the run a start was answered 202 for, failing with the
// answer's status and body (not a nil dereference) when it is another.
func accepted(t *testing.T, resp *protocol.StartRunResponse) string {
	t.Helper()
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), "the start was not accepted: %s", resp.Body)
	require.NotNil(t, resp.JSON202, "a 202 with no run in its body: %s", resp.Body)
	return resp.JSON202.ID
}

// finished returns the result a start with wait was answered 200 for, failing with the
// answer's status and body (not a nil dereference) when it is another.
func finished(t *testing.T, resp *protocol.StartRunResponse) protocol.RunResult {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode(), "the start did not answer its run's result: %s", resp.Body)
	require.NotNil(t, resp.JSON200, "a 200 with no result in its body: %s", resp.Body)
	return *resp.JSON200
}

// scheduledAt returns the runs' wake times, failing unless each is scheduled.
func scheduledAt(t *testing.T, c *protocol.ClientWithResponses, ids []string) []time.Time {
	t.Helper()
	var at []time.Time
	for _, id := range ids {
		run := getRun(t, c, id)
		require.Equal(t, protocol.RunStatusScheduled, run.Status, id)
		require.NotNil(t, run.WakeAt, id)
		at = append(at, *run.WakeAt)
	}
	return at
}

// requireSpaced checks that sorted times are exactly gap apart.
func requireSpaced(t *testing.T, at []time.Time, gap time.Duration) {
	t.Helper()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(at); i++ {
		require.Equal(t, gap, at[i].Sub(at[i-1]), "start %d after start %d", i, i-1)
	}
}

// TestThrottle throttles starts through a real gateway: the starts beyond the rate are
// scheduled at the times the rate allows, per key and per tenant; past max_queue they
// are refused; a sync start waits for its scheduled run.
func TestThrottle(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	var calls atomic.Int32
	app := s.NewApp()
	// One start each 6 minutes, two more at once: the runs past the burst never start
	// within the test, so their scheduled times are exact.
	functions.Register(app, "notify", echoFlow(&calls), functions.Throttle(functions.Rate{
		Limit: 10, Period: time.Hour, Burst: 2, Key: "input.customer",
	}))
	functions.Register(app, "queued", echoFlow(&calls), functions.Throttle(functions.Rate{
		Limit: 1, Period: time.Hour, MaxQueue: 2,
	}))
	functions.Register(app, "paced", echoFlow(&calls), functions.Throttle(functions.Rate{Limit: 1, Period: time.Second}))
	functions.Register(app, "daily", echoFlow(&calls), functions.Throttle(functions.Rate{Limit: 1, Period: 24 * time.Hour, MaxQueue: 100}))
	functions.Register(app, "keyed", echoFlow(&calls), functions.Throttle(functions.Rate{Limit: 1, Period: time.Hour}))
	url := s.ServeApp(t, app)
	for _, cl := range []*protocol.ClientWithResponses{c, other} {
		synced, err := cl.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}

	t.Run("SpreadsStartsAtTheRate", func(t *testing.T) {
		t.Parallel()
		var ids []string
		for i := range 6 {
			resp := startFlow(t, c, "notify", fmt.Sprintf(`{"customer":"c-9","n":%d}`, i), nil)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			ids = append(ids, accepted(t, resp))
		}
		// burst+1 start at once; each later one 6 minutes (1h/10) after the one before.
		for _, id := range ids[:3] {
			run := getRun(t, c, id)
			require.NotEqual(t, protocol.RunStatusScheduled, run.Status)
			require.Nil(t, run.Held)
		}
		at := scheduledAt(t, c, ids[3:])
		requireSpaced(t, at, 6*time.Minute)
		first := getRun(t, c, ids[0])
		require.Greater(t, at[0].Sub(first.CreatedAt), time.Minute, "the first held start waits about one interval")
		for _, id := range ids[3:] {
			run := getRun(t, c, id)
			require.NotNil(t, run.Held)
			require.Equal(t, "throttled: 10 per 1h0m0s (key customer=c-9)", *run.Held)
		}

		// Another customer's starts are not held back by c-9's.
		resp := startFlow(t, c, "notify", `{"customer":"c-1"}`, nil)
		require.Equal(t, http.StatusAccepted, resp.StatusCode())
		require.NotEqual(t, protocol.RunStatusScheduled, getRun(t, c, accepted(t, resp)).Status)

		// Nor is another tenant's, with the same function name and key.
		resp = startFlow(t, other, "notify", `{"customer":"c-9"}`, nil)
		require.Equal(t, http.StatusAccepted, resp.StatusCode())
		run := getRun(t, other, accepted(t, resp))
		require.NotEqual(t, protocol.RunStatusScheduled, run.Status)
		require.Nil(t, run.Held)
	})

	t.Run("AFullQueueIs429", func(t *testing.T) {
		t.Parallel()
		now := startFlow(t, c, "queued", `{}`, nil)
		require.Equal(t, http.StatusAccepted, now.StatusCode())
		var held []string
		for range 2 {
			resp := startFlow(t, c, "queued", `{}`, nil)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			held = append(held, accepted(t, resp))
		}
		requireSpaced(t, scheduledAt(t, c, held), time.Hour)
		full := startFlow(t, c, "queued", `{}`, nil)
		require.Equal(t, http.StatusTooManyRequests, full.StatusCode(), string(full.Body))
		require.Contains(t, string(full.Body), "throttle queue full: 2 starts wait already (max_queue)")
		after, err := strconv.Atoi(full.HTTPResponse.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.True(t, after >= 1 && after <= 3600, "Retry-After %d", after)

		// The refused start created no run.
		list, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("queued")})
		require.NoError(t, err)
		require.Len(t, list.JSON200.Runs, 3)
	})

	t.Run("NothingIsScheduledMoreThanAWeekAhead", func(t *testing.T) {
		t.Parallel()
		var held []string
		for i := range 8 {
			resp := startFlow(t, c, "daily", `{}`, nil)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			if i > 0 {
				held = append(held, accepted(t, resp))
			}
		}
		requireSpaced(t, scheduledAt(t, c, held), 24*time.Hour)
		far := startFlow(t, c, "daily", `{}`, nil)
		require.Equal(t, http.StatusTooManyRequests, far.StatusCode(), string(far.Body))
		require.Contains(t, string(far.Body), "would wait more than 168h0m0s")
	})

	t.Run("AKnownIdempotencyKeyTakesNoPlace", func(t *testing.T) {
		t.Parallel()
		keyed := &protocol.StartRunParams{IdempotencyKey: ptr("k-1")}
		first := startFlow(t, c, "keyed", `{}`, keyed)
		require.Equal(t, http.StatusAccepted, first.StatusCode(), string(first.Body))
		again := startFlow(t, c, "keyed", `{}`, keyed)
		// The same run: 202 while it runs, or 200 once it has completed (it is quick).
		switch again.StatusCode() {
		case http.StatusOK:
			require.Equal(t, accepted(t, first), again.JSON200.ID, string(again.Body))
		default:
			require.Equal(t, accepted(t, first), accepted(t, again))
		}
		other := startFlow(t, c, "keyed", `{}`, nil)
		at := scheduledAt(t, c, []string{accepted(t, other)})[0]
		require.Equal(t, time.Hour, at.Sub(getRun(t, c, accepted(t, first)).CreatedAt).Round(time.Second),
			"the second start in all waits one interval, not two")
		mismatch := startFlow(t, c, "keyed", `{"n":1}`, keyed)
		require.Equal(t, http.StatusConflict, mismatch.StatusCode(), string(mismatch.Body))
	})

	t.Run("ASyncStartWaitsForItsScheduledRun", func(t *testing.T) {
		t.Parallel()
		first := startFlow(t, c, "paced", `{"n":1}`, &protocol.StartRunParams{Wait: ptr("30s")})
		require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
		second := startFlow(t, c, "paced", `{"n":2}`, &protocol.StartRunParams{Wait: ptr("30s")})
		require.Equal(t, http.StatusOK, second.StatusCode(), string(second.Body))
		require.Equal(t, protocol.RunStatusCompleted, finished(t, second).Status)
		require.JSONEq(t, `{"customer":"","n":2}`, string(*finished(t, second).Output))
		// It started when the rate allowed: a second after the first's start.
		a, b := getRun(t, c, finished(t, first).ID), getRun(t, c, finished(t, second).ID)
		require.GreaterOrEqual(t, b.StartedAt.Sub(a.CreatedAt), time.Second)
		require.Nil(t, b.Held, "a claim clears held")
	})
}

// TestThrottleAcrossGateways starts runs of one throttled function on two gateways on
// one database at once: the rate holds across them.
func TestThrottleAcrossGateways(t *testing.T) {
	t.Parallel()
	a := stack.Start(t, stack.Options{})
	b := stack.Start(t, stack.Options{DatabaseURL: a.Pool.Config().ConnString()})
	ca, cb := a.Client(t, a.Token), b.Client(t, b.Token)
	var calls atomic.Int32
	app := a.NewApp()
	functions.Register(app, "global", echoFlow(&calls), functions.Throttle(functions.Rate{Limit: 10, Period: time.Hour}))
	a.Sync(t, a.ServeApp(t, app))

	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			cl := ca
			if i%2 == 1 {
				cl = cb
			}
			resp, err := cl.StartRunWithBodyWithResponse(context.Background(), "global", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
			if err == nil && resp.StatusCode() == http.StatusAccepted {
				mu.Lock()
				ids = append(ids, resp.JSON202.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, ids, 8)
	var held []string
	for _, id := range ids {
		if getRun(t, ca, id).Status != protocol.RunStatusScheduled {
			continue
		}
		held = append(held, id)
	}
	require.Len(t, held, 7, "one start at once, the others at the rate")
	requireSpaced(t, scheduledAt(t, cb, held), 6*time.Minute)
}

// TestRateLimit drops starts beyond a rate: 429 with Retry-After, per key; an event's
// trigger beyond it is skipped and recorded in the event.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	bob := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t1", Roles: []string{"developer"}}))
	var calls atomic.Int32
	app := s.NewApp()
	functions.Register(app, "limited", echoFlow(&calls), functions.RateLimit(functions.Rate{
		Limit: 1, Period: time.Hour, Burst: 1, Key: functions.KeySubject,
	}))
	functions.Register(app, "ingest", echoFlow(&calls), functions.RateLimit(functions.Rate{
		Limit: 1, Period: time.Hour, Key: "input.customer",
	}), functions.OnEvent("order.created"))
	functions.Register(app, "ticked", echoFlow(&calls), functions.RateLimit(functions.Rate{Limit: 1, Period: time.Hour}))
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("StartsBeyondTheRateAre429", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, http.StatusOK, startFlow(t, c, "limited", `{"n":1}`, &protocol.StartRunParams{Wait: ptr("30s")}).StatusCode())
		require.Equal(t, http.StatusAccepted, startFlow(t, c, "limited", `{"n":2}`, nil).StatusCode(), "the burst")
		for _, params := range []*protocol.StartRunParams{nil, {Wait: ptr("30s")}} {
			resp := startFlow(t, c, "limited", `{"n":3}`, params)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode(), string(resp.Body))
			require.Contains(t, string(resp.Body), "rate limited: 1 per 1h0m0s (key subject=alice)")
			after, err := strconv.Atoi(resp.HTTPResponse.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.True(t, after >= 1 && after <= 3600, "Retry-After %d", after)
		}
		list, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("limited")})
		require.NoError(t, err)
		require.Len(t, list.JSON200.Runs, 2, "a refused start creates no run")

		// Bob has his own count.
		require.Equal(t, http.StatusAccepted, startFlow(t, bob, "limited", `{}`, nil).StatusCode())
	})

	t.Run("AScheduleTickBeyondTheRateStartsNoRun", func(t *testing.T) {
		t.Parallel()
		put, err := c.PutScheduleWithResponse(t.Context(), "often", protocol.ScheduleSpec{Function: "ticked", Cron: "@every 1s"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, put.StatusCode(), string(put.Body))
		var first string
		waitUntil(t, 20*time.Second, func() bool {
			got, err := c.GetScheduleWithResponse(t.Context(), "often")
			require.NoError(t, err)
			sch := got.JSON200
			if first == "" && sch.LastRunID != nil {
				first = *sch.LastRunID
			}
			// A later tick was handled and started no run.
			return first != "" && sch.LastTickAt != nil && sch.LastRunID == nil
		}, "a skipped tick")
		list, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("ticked")})
		require.NoError(t, err)
		require.Len(t, list.JSON200.Runs, 1)
		require.Equal(t, first, list.JSON200.Runs[0].ID)
	})

	t.Run("AnEventBeyondTheRateIsSkippedAndRecorded", func(t *testing.T) {
		t.Parallel()
		send := func(id string) protocol.EventReceipt {
			resp, err := c.SendEventWithResponse(t.Context(), protocol.EventSend{ID: &id, Name: "order.created",
				Data: ptr(protocol.AnyJSON(`{"customer":"c-9"}`))})
			require.NoError(t, err)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			return *resp.JSON202
		}
		first := send("e-1")
		require.Len(t, first.Runs, 1)
		require.Nil(t, first.Skipped)
		second := send("e-2")
		require.Empty(t, second.Runs)
		require.NotNil(t, second.Skipped)
		require.Equal(t, []protocol.SkippedStart{{Function: "ingest", Reason: "rate limited: 1 per 1h0m0s (key customer=c-9)"}}, *second.Skipped)

		got, err := c.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: ptr("order.created")})
		require.NoError(t, err)
		require.Len(t, got.JSON200.Events, 2)
		ev := got.JSON200.Events[0]
		require.Equal(t, "e-2", ev.ID)
		require.NotNil(t, ev.Skipped)
		require.Equal(t, "ingest", (*ev.Skipped)[0].Function)
		require.Len(t, got.JSON200.Events[1].Runs, 1)
		require.Nil(t, got.JSON200.Events[1].Skipped)
	})
}

// TestRateLimitAdmitsLimitAtOnce: a rate limit of N per period admits N starts back to
// back by default (a full bucket) and refuses the next; Spaced (burst 0) admits one,
// and the next only period/N later. The period is an hour, so that no start here is
// slow enough to earn another.
func TestRateLimitAdmitsLimitAtOnce(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	var calls atomic.Int32
	app := s.NewApp()
	functions.Register(app, "default", echoFlow(&calls), functions.RateLimit(functions.Rate{Limit: 2, Period: time.Hour}))
	functions.Register(app, "spaced", echoFlow(&calls), functions.RateLimit(functions.Rate{Limit: 2, Period: time.Hour, Spaced: true}))
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	got, err := c.GetFunctionWithResponse(t.Context(), "spaced")
	require.NoError(t, err)
	require.Equal(t, 0, *got.JSON200.Config.RateLimit.Burst, "Spaced is burst 0 on the wire")

	refused := func(name string) {
		t.Helper()
		resp := startFlow(t, c, name, `{}`, nil)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "rate limited: 2 per 1h0m0s")
		after, err := strconv.Atoi(resp.HTTPResponse.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.True(t, after > 0 && after <= 1800, "Retry-After %d: within period/limit", after)
	}
	accepted(t, startFlow(t, c, "default", `{}`, nil))
	accepted(t, startFlow(t, c, "default", `{}`, nil))
	refused("default")

	accepted(t, startFlow(t, c, "spaced", `{}`, nil))
	refused("spaced")

	list, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("default")})
	require.NoError(t, err)
	require.Len(t, list.JSON200.Runs, 2)
}

// TestDebounce collapses starts into one run with the last input, capped by max_wait.
func TestDebounce(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
	var slowCalls, fastCalls atomic.Int32
	app := s.NewApp()
	functions.Register(app, "digest", echoFlow(&slowCalls), functions.Debounce(time.Hour, "input.customer", 2*time.Hour))
	functions.Register(app, "capped", echoFlow(&slowCalls), functions.Debounce(time.Hour, "", time.Hour))
	functions.Register(app, "quick", echoFlow(&fastCalls), functions.Debounce(2*time.Second, "input.customer", 0))
	var eventCalls atomic.Int32
	functions.Register(app, "on-change", echoFlow(&eventCalls), functions.Debounce(2*time.Second, "input.customer", 0),
		functions.OnEvent("doc.changed"))
	url := s.ServeApp(t, app)
	for _, cl := range []*protocol.ClientWithResponses{c, other} {
		synced, err := cl.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}

	t.Run("StartsCollapseIntoOneRunWithTheLastInput", func(t *testing.T) {
		t.Parallel()
		var id string
		var wakes []time.Time
		for i := range 5 {
			resp := startFlow(t, c, "digest", fmt.Sprintf(`{"customer":"c-9","n":%d}`, i), nil)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			if id == "" {
				id = accepted(t, resp)
			}
			require.Equal(t, id, accepted(t, resp), "start %d", i)
			run := getRun(t, c, id)
			require.Equal(t, protocol.RunStatusScheduled, run.Status)
			wakes = append(wakes, *run.WakeAt)
			require.Equal(t, "debounced until "+run.WakeAt.UTC().Format("2006-01-02T15:04:05.000Z"), *run.Held)
		}
		for i := 1; i < len(wakes); i++ {
			require.True(t, wakes[i].After(wakes[i-1]), "each start pushes the run back")
		}
		require.JSONEq(t, `{"customer":"c-9","n":4}`, string(*getRun(t, c, id).Input))

		// Another key has its own run; so has another tenant.
		c1 := startFlow(t, c, "digest", `{"customer":"c-1"}`, nil)
		require.NotEqual(t, id, accepted(t, c1))
		t2 := startFlow(t, other, "digest", `{"customer":"c-9"}`, nil)
		require.NotEqual(t, id, accepted(t, t2))
		gone, err := other.GetRunWithResponse(t.Context(), id, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, gone.StatusCode())
	})

	t.Run("MaxWaitCapsThePush", func(t *testing.T) {
		t.Parallel()
		first := startFlow(t, c, "capped", `{"n":1}`, nil)
		wake := *getRun(t, c, accepted(t, first)).WakeAt
		second := startFlow(t, c, "capped", `{"n":2}`, nil)
		require.Equal(t, accepted(t, first), accepted(t, second))
		require.Equal(t, wake, *getRun(t, c, accepted(t, first)).WakeAt, "max_wait (1h) from the first start caps it")
	})

	t.Run("TheRunStartsOnceAfterTheLastPush", func(t *testing.T) {
		t.Parallel()
		a := startFlow(t, c, "quick", `{"customer":"q","n":1}`, nil)
		b := startFlow(t, c, "quick", `{"customer":"q","n":2}`, nil)
		require.Equal(t, accepted(t, a), accepted(t, b))
		// A sync start collapses too, and waits for the one run.
		last := startFlow(t, c, "quick", `{"customer":"q","n":3}`, &protocol.StartRunParams{Wait: ptr("30s")})
		require.Equal(t, http.StatusOK, last.StatusCode(), string(last.Body))
		require.Equal(t, accepted(t, a), finished(t, last).ID)
		require.JSONEq(t, `{"customer":"q","n":3}`, string(*finished(t, last).Output))
		list, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("quick")})
		require.NoError(t, err)
		require.Len(t, list.JSON200.Runs, 1)
		require.Equal(t, 1, getRun(t, c, accepted(t, a)).Invocations, "started once")
		require.EqualValues(t, 1, fastCalls.Load())

		// The window closed with the run's start: the next start opens another.
		next := startFlow(t, c, "quick", `{"customer":"q","n":4}`, nil)
		require.NotEqual(t, accepted(t, a), accepted(t, next))
	})

	t.Run("EventsCollapseToo", func(t *testing.T) {
		t.Parallel()
		var runs []string
		for i := range 3 {
			resp, err := c.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "doc.changed",
				Data: ptr(protocol.AnyJSON(fmt.Sprintf(`{"customer":"e","n":%d}`, i)))})
			require.NoError(t, err)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			require.Len(t, resp.JSON202.Runs, 1)
			runs = append(runs, resp.JSON202.Runs[0])
		}
		require.Equal(t, []string{runs[0], runs[0], runs[0]}, runs, "each event names the one run")
		res, err := c.GetRunResultWithResponse(t.Context(), runs[0], &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.JSONEq(t, `{"customer":"e","n":2}`, string(*res.JSON200.Output))
		require.EqualValues(t, 1, eventCalls.Load())
	})

	t.Run("ADelayedStartIs400", func(t *testing.T) {
		t.Parallel()
		resp := startFlow(t, c, "digest", `{}`, &protocol.StartRunParams{Delay: ptr("1m")})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode())
		require.Contains(t, string(resp.Body), "debounced")
	})
}

// TestFlowConfigBadRequests registers bad flow control: a 400 naming the field.
func TestFlowConfigBadRequests(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	for _, bad := range []struct{ config, want string }{
		{`{"throttle":{"limit":10,"period":"1s","key":"customer_id"}}`, "config.throttle.key"},
		{`{"throttle":{"limit":10,"period":"1s","key":"input."}}`, "config.throttle.key"},
		{`{"throttle":{"limit":10,"period":"1s","key":"identity.claims"}}`, "config.throttle.key"},
		{`{"rate_limit":{"limit":10,"period":"1s","key":"input.a b"}}`, "config.rate_limit.key"},
		{`{"throttle":{"limit":0,"period":"1s"}}`, "config.throttle.limit"},
		{`{"rate_limit":{"limit":1,"period":"5ms"}}`, "config.rate_limit.period"},
		{`{"throttle":{"limit":1,"period":"25h"}}`, "config.throttle.period"},
		{`{"throttle":{"limit":1,"period":"soon"}}`, "config.throttle.period"},
		{`{"throttle":{"limit":1,"period":"1s","burst":-1}}`, "config.throttle.burst"},
		{`{"throttle":{"limit":1,"period":"1s","max_queue":0}}`, "config.throttle.max_queue"},
		{`{"debounce":{"period":"1m","max_wait":"30s"}}`, "config.debounce.max_wait"},
		{`{"debounce":{"period":"1ms"}}`, "config.debounce.period"},
		{`{"debounce":{"period":"1s","key":"identity.roles"}}`, "config.debounce.key"},
		{`{"debounce":{"period":"1s"},"throttle":{"limit":1,"period":"1s"}}`, "config.debounce cannot be combined"},
	} {
		var cfg protocol.FunctionConfig
		require.NoError(t, json.Unmarshal([]byte(bad.config), &cfg))
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "f", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/f", Config: &cfg})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), bad.config)
		require.Contains(t, resp.ApplicationProblemJSON400.Detail, bad.want, bad.config)
	}
	// An app's manifest is checked the same way: its author cannot slip a bad throttle in.
	app := s.NewApp()
	functions.Register(app, "greedy", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil },
		functions.Throttle(functions.Rate{Limit: 1_000_000, Period: time.Millisecond, MaxQueue: 1 << 30}))
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, synced.StatusCode(), string(synced.Body))
	require.Contains(t, string(synced.Body), "config.throttle.limit")
	require.Contains(t, string(synced.Body), "greedy")

	ok, err := c.RegisterFunctionWithResponse(t.Context(), "f", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/f", Config: &protocol.FunctionConfig{
		Throttle: &protocol.RateConfig{Limit: 10, Period: "1s", Burst: ptr(5), Key: ptr("identity.claims.org")},
	}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ok.StatusCode(), string(ok.Body))
	require.Equal(t, "identity.claims.org", *ok.JSON200.Config.Throttle.Key)
}

// TestDebounceAcrossGateways sends concurrent starts of one debounced key to two
// gateways on one database: they collapse into one run, which runs once.
func TestDebounceAcrossGateways(t *testing.T) {
	t.Parallel()
	a := stack.Start(t, stack.Options{})
	b := stack.Start(t, stack.Options{DatabaseURL: a.Pool.Config().ConnString()})
	ca, cb := a.Client(t, a.Token), b.Client(t, b.Token)
	var calls atomic.Int32
	app := a.NewApp()
	functions.Register(app, "merged", echoFlow(&calls), functions.Debounce(3*time.Second, "input.customer", 0))
	a.Sync(t, a.ServeApp(t, app))

	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			cl := ca
			if i%2 == 1 {
				cl = cb
			}
			resp, err := cl.StartRunWithBodyWithResponse(context.Background(), "merged", &protocol.StartRunParams{},
				"application/json", strings.NewReader(fmt.Sprintf(`{"customer":"c","n":%d}`, i)))
			if err == nil && resp.StatusCode() == http.StatusAccepted {
				mu.Lock()
				ids[resp.JSON202.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, ids, 1, "every start answers the one run")
	var id string
	for id = range ids {
	}
	res, err := cb.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	run := getRun(t, ca, id)
	require.JSONEq(t, string(*run.Input), string(*res.JSON200.Output), "it ran with the input it holds: the last start's")
	require.Equal(t, 1, run.Invocations)
	require.EqualValues(t, 1, calls.Load(), "started once")
}
