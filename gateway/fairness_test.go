package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// fnCall is one call of a test function: whose run it is.
type fnCall struct{ tenant, run, label string }

// blockingApp serves "slow", which tells entered of each call and blocks until release
// is closed (or its call ends).
func blockingApp(s *stack.Stack, entered chan<- fnCall, release <-chan struct{}) *functions.App {
	app := s.NewApp()
	functions.Register(app, "slow", func(ctx context.Context, _ struct{}) (string, error) {
		entered <- fnCall{tenant: functions.IdentityFrom(ctx).Tenant, run: functions.RunFrom(ctx).ID}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	})
	return app
}

// tenantClient returns a client of an admin of tenant that synced the app at appURL.
func tenantClient(t *testing.T, s *stack.Stack, tenant, appURL string) *protocol.ClientWithResponses {
	t.Helper()
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "admin-" + tenant, Tenant: tenant, Roles: []string{"admin"}}))
	resp, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return c
}

// startQueued starts a run of name without waiting, so a River worker invokes it.
func startQueued(t *testing.T, c *protocol.ClientWithResponses, name, input string, params *protocol.StartRunParams) string {
	t.Helper()
	if params == nil {
		params = &protocol.StartRunParams{}
	}
	resp := startRun(t, c, name, input, params)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return resp.JSON202.ID
}

// nextCall returns the next call of a test function, failing after 30s.
func nextCall(t *testing.T, entered <-chan fnCall, what string) fnCall {
	t.Helper()
	select {
	case c := <-entered:
		return c
	case <-time.After(30 * time.Second):
		t.Fatalf("no call of %s after 30s", what)
		return fnCall{}
	}
}

// snoozed counts the invoke jobs of tenant that River's workers snoozed: held back by
// the fair share.
func snoozed(t *testing.T, s *stack.Stack, tenant string) (n int) {
	t.Helper()
	require.NoError(t, s.Pool.QueryRow(t.Context(), `
		SELECT count(*) FROM river_job
		WHERE kind = 'stepgate.invoke' AND args->>'tenant' = $1 AND (metadata->>'snoozes')::int > 0`, tenant).Scan(&n))
	return n
}

// TestFairShare: a tenant that floods a gateway with more slow runs than it has
// workers, at the first priority even, does not delay another tenant's run until one
// of its own ends: the other tenant's run starts while all of the first's are blocked.
func TestFairShare(t *testing.T) {
	t.Parallel()
	const workers = 10 // the reserve defaults to a tenth: 1
	s := stack.Start(t, stack.Options{Workers: workers})
	entered, release := make(chan fnCall, 100), make(chan struct{})
	appURL := s.ServeApp(t, blockingApp(s, entered, release))
	t.Cleanup(func() { close(release) }) // before the gateway stops
	a := tenantClient(t, s, "tenant-a", appURL)
	b := tenantClient(t, s, "tenant-b", appURL)

	const flood = 3 * workers
	var aRuns []string
	for range flood {
		aRuns = append(aRuns, startQueued(t, a, "slow", `{}`, &protocol.StartRunParams{Priority: ptr(1)}))
	}
	for i := range workers - 1 {
		require.Equal(t, "tenant-a", nextCall(t, entered, "a's runs").tenant, "call %d", i+1)
	}
	// a's next jobs are fetched and held back, not worked: a holds all but the reserve.
	waitUntil(t, 30*time.Second, func() bool { return snoozed(t, s, "tenant-a") > 0 }, "snoozed job of a")
	require.Empty(t, entered, "a, alone, holds %d of the %d workers", workers-1, workers)

	started := time.Now()
	bRun := startQueued(t, b, "slow", `{}`, nil)
	c := nextCall(t, entered, "b's run")
	latency := time.Since(started)
	require.Equal(t, fnCall{tenant: "tenant-b", run: bRun}, c, "b's run starts while a's %d runs are all blocked", workers-1)
	t.Logf("b's run started %s after it was queued, behind %d blocked and %d queued runs of a (priority 1)",
		latency, workers-1, flood-(workers-1))
	var running, ended int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `
		SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled'))
		FROM stepgate.run WHERE tenant = 'tenant-a'`).Scan(&running, &ended))
	require.Equal(t, workers-1, running, "a's runs in flight")
	require.Zero(t, ended, "b did not need any run of a to end")
	var heldAhead int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `
		SELECT count(*) FROM river_job
		WHERE kind = 'stepgate.invoke' AND args->>'tenant' = 'tenant-a' AND (metadata->>'snoozes')::int > 0 AND priority <> 4`).Scan(&heldAhead))
	require.Zero(t, heldAhead, "a's held jobs went back to the queue at the last priority, behind b's")
	// The runs held back say why; the others, started, say nothing.
	var held, inFlight int
	for _, id := range aRuns {
		r := getRun(t, a, id)
		switch r.Status {
		case protocol.RunStatusQueued:
			if r.Held != nil {
				require.Equal(t, "waiting for a worker: its tenant holds its fair share of the gateway's workers", *r.Held)
				held++
			}
		case protocol.RunStatusRunning:
			require.Nil(t, r.Held, "a claim clears held")
			inFlight++
		}
	}
	require.Equal(t, workers-1, inFlight)
	require.Positive(t, held)
	require.Nil(t, getRun(t, b, bRun).Held)
}

// TestFairShareAlone: a tenant alone uses every worker but the reserve, and with no
// reserve every worker.
func TestFairShareAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		reserve, holding int
	}{
		{"Reserve3", 3, 5}, // all but the reserve (more than its share of 8/2 = 4)
		{"NoReserve", -1, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const workers = 8
			s := stack.Start(t, stack.Options{Workers: workers, FairReserve: tc.reserve})
			entered, release := make(chan fnCall, 100), make(chan struct{})
			appURL := s.ServeApp(t, blockingApp(s, entered, release))
			t.Cleanup(func() { close(release) })
			a := tenantClient(t, s, "tenant-a", appURL)
			for range 2 * workers {
				startQueued(t, a, "slow", `{}`, nil)
			}
			for i := range tc.holding {
				require.Equal(t, "tenant-a", nextCall(t, entered, "a's runs").tenant, "call %d", i+1)
			}
			if tc.reserve > 0 {
				waitUntil(t, 30*time.Second, func() bool { return snoozed(t, s, "tenant-a") > 0 }, "snoozed job of a")
			} else {
				// Every worker is busy: River fetches nothing more until a run ends.
				require.Zero(t, snoozed(t, s, "tenant-a"), "nothing is held back without a reserve")
			}
			require.Empty(t, entered, "a holds %d of the %d workers", tc.holding, workers)
		})
	}
}

// TestPriority: with the workers busy, queued runs start in priority order (the start's
// priority, else the function's), across functions and tenants, and each run's every
// invoke job carries its priority.
func TestPriority(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Workers: 1}) // one worker: no reserve, a strict order
	entered, release := make(chan fnCall, 100), make(chan struct{})
	app := blockingApp(s, entered, release)
	record := func(ctx context.Context, in struct{ Label string }) (string, error) {
		entered <- fnCall{tenant: functions.IdentityFrom(ctx).Tenant, run: functions.RunFrom(ctx).ID, label: in.Label}
		return in.Label, nil
	}
	functions.Register(app, "batch", record, functions.Priority(4))
	functions.Register(app, "plain", record)
	appURL := s.ServeApp(t, app)
	a := tenantClient(t, s, "tenant-a", appURL)
	b := tenantClient(t, s, "tenant-b", appURL)

	startQueued(t, a, "slow", `{}`, nil)
	nextCall(t, entered, "the run that holds the worker")
	var batch []string
	for _, l := range []string{"batch-1", "batch-2", "batch-3"} {
		batch = append(batch, startQueued(t, a, "batch", `{"Label":"`+l+`"}`, nil))
	}
	plain := startQueued(t, a, "plain", `{"Label":"plain"}`, nil)
	third := startQueued(t, b, "batch", `{"Label":"b-third"}`, &protocol.StartRunParams{Priority: ptr(3)})
	urgent := startQueued(t, a, "batch", `{"Label":"urgent"}`, &protocol.StartRunParams{Priority: ptr(1)})
	close(release)

	var order []string
	for range 6 {
		order = append(order, nextCall(t, entered, "queued runs").label)
	}
	require.Equal(t, []string{"urgent", "plain", "b-third", "batch-1", "batch-2", "batch-3"}, order,
		"priority 1 (the start's), 2 (the default), 3 (another tenant's start), 4 (the function's), each oldest first")
	require.Equal(t, 1, *getRun(t, a, urgent).Priority)
	require.Equal(t, 2, *getRun(t, a, plain).Priority)
	require.Equal(t, 4, *getRun(t, a, batch[0]).Priority)
	require.Equal(t, 3, *getRun(t, b, third).Priority)
}

// TestPriorityOfEveryJob: a run's priority is its jobs' after sleeps and its child's
// end (the parent's wake-up names only the run), and a child run has its function's.
func TestPriorityOfEveryJob(t *testing.T) {
	t.Parallel()
	// Every job as inserted: a gateway's claim deletes a run's scheduled job no worker
	// has yet (journal.ClaimWokenRun).
	s := stack.Start(t, stack.Options{DatabaseURL: pgtest.DBURLKeepingJobs(t)})
	app := s.NewApp()
	functions.Register(app, "child", func(ctx context.Context, _ struct{}) (string, error) {
		return "child done", step.Sleep(ctx, "nap", time.Millisecond)
	}, functions.Priority(4))
	functions.Register(app, "on-paid", func(context.Context, struct{}) (string, error) { return "paid", nil })
	functions.Register(app, "parent", func(ctx context.Context, _ struct{}) (string, error) {
		if err := step.Sleep(ctx, "nap", time.Millisecond); err != nil {
			return "", err
		}
		return step.Invoke[string](ctx, "child", "child", struct{}{}).Get()
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	resp := startRun(t, c, "parent", `{}`, &protocol.StartRunParams{Priority: ptr(3)})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	parent := resp.JSON202.ID
	res, err := c.GetRunResultWithResponse(t.Context(), parent, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status, string(res.Body))
	var child string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id::text FROM stepgate.run WHERE parent_id = $1`, parent).Scan(&child))

	jobs := func(runID string) (priorities []int, tenants []string) {
		rows, err := s.Pool.Query(t.Context(), `
			SELECT priority, coalesce(args->>'tenant', '') FROM public.inserted_job
			WHERE kind = 'stepgate.invoke' AND args->>'run_id' = $1 ORDER BY id`, runID)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var p int
			var tenant string
			require.NoError(t, rows.Scan(&p, &tenant))
			priorities, tenants = append(priorities, p), append(tenants, tenant)
		}
		require.NoError(t, rows.Err())
		return priorities, tenants
	}
	p, tenants := jobs(parent)
	// Its start, its wake-up after the sleep, its wake-up after the child (made by the
	// child's end, with the run's id only).
	require.Equal(t, []int{3, 3, 3}, p)
	require.Equal(t, []string{auth.DefaultTenant, auth.DefaultTenant, auth.DefaultTenant}, tenants)
	p, tenants = jobs(child)
	require.Equal(t, []int{4, 4}, p, "the child's start and its wake-up: its function's priority")
	require.Equal(t, []string{auth.DefaultTenant, auth.DefaultTenant}, tenants)
	require.Equal(t, 4, *getRun(t, c, child).Priority)

	// A run an event starts has its function's priority, and so has its job.
	reg, err := c.RegisterFunctionWithResponse(t.Context(), "on-paid", protocol.FunctionRegistration{
		URL:    s.ServeApp(t, app) + "on-paid",
		Config: &protocol.FunctionConfig{Priority: ptr(4), Triggers: &[]protocol.EventTrigger{{Event: "paid"}}},
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	ev := mustSendEvent(t, c, protocol.EventSend{Name: "paid"})
	require.Len(t, ev.Runs, 1)
	require.Equal(t, 4, *getRun(t, c, ev.Runs[0]).Priority)
	p, tenants = jobs(ev.Runs[0])
	require.Equal(t, 4, p[0])
	require.Equal(t, auth.DefaultTenant, tenants[0])
}

// TestPriorityBadValues: a priority other than 1 to 4 is a 400 naming the field.
func TestPriorityBadValues(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	for _, v := range []string{"0", "5", "x", "-1", "1.5"} {
		status, body := rawRequest(t, http.MethodPost, s.URL+"/v1/functions/hello/runs?priority="+v, s.Token, "application/json", strings.NewReader(`{}`))
		require.Equal(t, http.StatusBadRequest, status, v)
		require.Contains(t, body["detail"], "priority", v)
	}
	for _, v := range []string{"0", "5", `"x"`, "2.5"} {
		status, body := rawRequest(t, http.MethodPut, s.URL+"/v1/functions/prio", s.Token, "application/json",
			strings.NewReader(`{"url":"http://127.0.0.1:1/","config":{"priority":`+v+`}}`))
		require.Equal(t, http.StatusBadRequest, status, v)
		require.Contains(t, body["detail"], "priority", v)
	}
	status, body := rawRequest(t, http.MethodPut, s.URL+"/v1/functions/prio", s.Token, "application/json",
		strings.NewReader(`{"url":"http://127.0.0.1:1/","config":{"priority":4}}`))
	require.Equal(t, http.StatusOK, status, body)
	require.EqualValues(t, 4, body["config"].(map[string]any)["priority"])
}

// TestFairShareBacklog: another tenant's run starts while a tenant's backlog many times
// the workers is queued ahead of it at the first priority and its runs hold all but the
// reserve: River fetches and snoozes the backlog's jobs until it reaches the other's.
// The time that takes is logged (docs/benchmarks-history.md, "Fair share (issue 12)"), not
// asserted. Not parallel: it runs before the package's parallel tests, so its figure is
// its own and its load (a flood from 8 clients) does not slow theirs.
func TestFairShareBacklog(t *testing.T) {
	const workers, flood = 10, 200
	s := stack.Start(t, stack.Options{Workers: workers})
	entered, release := make(chan fnCall, flood+10), make(chan struct{})
	appURL := s.ServeApp(t, blockingApp(s, entered, release))
	t.Cleanup(func() { close(release) })
	a := tenantClient(t, s, "tenant-a", appURL)
	b := tenantClient(t, s, "tenant-b", appURL)
	// The flood comes in from 8 clients at once, faster than one.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range flood / 8 {
				resp, err := a.StartRunWithBodyWithResponse(context.Background(), "slow", &protocol.StartRunParams{Priority: ptr(1)}, "application/json", strings.NewReader(`{}`))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.StatusCode() != http.StatusAccepted {
					t.Errorf("start: HTTP %d: %s", resp.StatusCode(), resp.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	started := time.Now()
	bRun := startQueued(t, b, "slow", `{}`, nil)
	var aCalls int
	for {
		c := nextCall(t, entered, "b's run")
		if c.tenant == "tenant-b" {
			require.Equal(t, bRun, c.run)
			break
		}
		aCalls++
	}
	latency := time.Since(started)
	require.LessOrEqual(t, aCalls, workers-1, "a never took the reserve")
	t.Logf("b's run started %s after it was queued behind %d runs of a (priority 1), %d of them started meanwhile; %d jobs of a snoozed",
		latency, flood, aCalls, snoozed(t, s, "tenant-a"))
}

// TestFairShareWakes: runs woken at once are admitted by the fair share as their starts
// are, whether their sleeps end (their timers fire) or an event resumes their waits: a
// tenant's many runs never hold more than its share of the workers at once (a wake of a
// tenant at its share is left to the run's River job, which the workers hold back),
// while another tenant's run starts.
func TestFairShareWakes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"sleep", "event"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			requireWakesWithinShare(t, mode)
		})
	}
}

// requireWakesWithinShare: see TestFairShareWakes; mode says what wakes the runs.
func requireWakesWithinShare(t *testing.T, mode string) {
	// The reserve zone begins at one busy worker: a tenant holds at most its share,
	// 4/2 = 2, whether alone or not.
	const workers, reserve, share, runs = 4, 3, 2, 8
	s := stack.Start(t, stack.Options{Workers: workers, FairReserve: reserve, MaintainInterval: 100 * time.Millisecond})
	entered, release := make(chan fnCall, 100), make(chan struct{})
	app := blockingApp(s, entered, release)
	var mu sync.Mutex
	inFlight, most := map[string]int{}, map[string]int{}
	functions.Register(app, "napper", func(ctx context.Context, in struct{ Mode string }) (string, error) {
		var err error
		if in.Mode == "sleep" {
			err = step.Sleep(ctx, "nap", time.Hour)
		} else {
			_, err = step.WaitForEvent[struct{}](ctx, "go", "go", step.Timeout(time.Hour)).Get()
		}
		if err != nil {
			return "", err
		}
		tenant := functions.IdentityFrom(ctx).Tenant
		mu.Lock()
		inFlight[tenant]++
		most[tenant] = max(most[tenant], inFlight[tenant])
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight[tenant]--
			mu.Unlock()
		}()
		entered <- fnCall{tenant: tenant, run: functions.RunFrom(ctx).ID, label: "woken"}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "awake", nil
	})
	appURL := s.ServeApp(t, app)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	a := tenantClient(t, s, "tenant-a", appURL)
	b := tenantClient(t, s, "tenant-b", appURL)

	var aRuns []string
	for range runs {
		aRuns = append(aRuns, startQueued(t, a, "napper", `{"Mode":"`+mode+`"}`, nil))
	}
	count := func(query string) (n int) {
		require.NoError(t, s.Pool.QueryRow(t.Context(), query).Scan(&n))
		return n
	}
	waitUntil(t, 60*time.Second, func() bool {
		return count(`SELECT count(*) FROM stepgate.run WHERE tenant = 'tenant-a' AND status = 'suspended' AND wake_at > now() + interval '1 minute'`) == runs
	}, "sleep or wait of every run of a")
	// Wake them all at once.
	if mode == "sleep" {
		// As if the hour had passed: their timers are armed as the time nears.
		_, err := s.Pool.Exec(t.Context(), `
			WITH r AS (UPDATE stepgate.run SET wake_at = now() + interval '500 milliseconds' WHERE tenant = 'tenant-a' RETURNING id)
			UPDATE river_job SET scheduled_at = now() + interval '500 milliseconds'
			WHERE kind = 'stepgate.invoke' AND state = 'scheduled' AND args->>'run_id' IN (SELECT id::text FROM r)`)
		require.NoError(t, err)
	} else {
		mustSendEvent(t, a, protocol.EventSend{Name: "go"})
	}
	// held counts a's runs whose wake-up a worker held back: their River job was
	// snoozed since the wake.
	held := func() int {
		return count(`
			SELECT count(*) FROM stepgate.run r
			JOIN LATERAL (SELECT metadata FROM river_job
				WHERE kind = 'stepgate.invoke' AND args->>'run_id' = r.id::text ORDER BY id DESC LIMIT 1) j ON true
			WHERE r.tenant = 'tenant-a' AND r.status IN ('queued', 'suspended') AND r.wake_at <= now()
				AND (j.metadata->>'snoozes')::int > 0`)
	}
	woken := 0
	deadline := time.After(60 * time.Second)
	for woken < share || held() < runs-share {
		select {
		case c := <-entered:
			require.Equal(t, "tenant-a", c.tenant)
			woken++
			require.LessOrEqual(t, woken, share, "a's woken runs in flight at once, over its share of %d", share)
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("after 60s: %d of a's runs woken, %d held back", woken, held())
		}
	}
	// a holds its share with woken runs; b's run starts without any of them ending.
	bRun := startQueued(t, b, "slow", `{}`, nil)
	require.Equal(t, fnCall{tenant: "tenant-b", run: bRun}, nextCall(t, entered, "b's run"))

	once.Do(func() { close(release) })
	for _, id := range aRuns {
		res, err := a.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("60s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status, string(res.Body))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, share, most["tenant-a"], "a's woken runs in flight at once, at most")
}
