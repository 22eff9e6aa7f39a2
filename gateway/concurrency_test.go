package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// gates is a function whose invocations each block until the test releases their run
// (or the call is cancelled), and which counts the calls in flight.
type gates struct {
	entered chan string // a run's id, when its invocation begins
	mu      sync.Mutex
	open    map[string]chan struct{}
	now     atomic.Int32
	max     atomic.Int32
}

func newGates() *gates {
	return &gates{entered: make(chan string, 100), open: map[string]chan struct{}{}}
}

func (g *gates) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := g.open[id]
	if ch == nil {
		ch = make(chan struct{})
		g.open[id] = ch
	}
	return ch
}

func (g *gates) release(id string) { close(g.gate(id)) }

type gateInput struct {
	CustomerID string `json:"customer_id"`
}

func (g *gates) register(app *functions.App, name string, opts ...functions.Option) {
	functions.Register(app, name, func(ctx context.Context, in gateInput) (string, error) {
		id := functions.RunFrom(ctx).ID
		n := g.now.Add(1)
		defer g.now.Add(-1)
		for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
		}
		g.entered <- id
		select {
		case <-g.gate(id):
			return "done " + in.CustomerID, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, opts...)
}

// awaitEntered returns the run whose invocation began next, failing after 30s.
func (g *gates) awaitEntered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no invocation began within 30s")
		return ""
	}
}

// requireNoneEntered checks that no invocation has begun (yet): what is held stays held
// until the test frees a slot, so no wait is needed to see it.
func (g *gates) requireNoneEntered(t *testing.T) {
	t.Helper()
	select {
	case id := <-g.entered:
		t.Fatalf("run %s was invoked while it should be held", id)
	default:
	}
}

// awaitHeld waits until run id is held and returns why.
func awaitHeld(t *testing.T, c *protocol.ClientWithResponses, id string) string {
	t.Helper()
	var held string
	waitUntil(t, 30*time.Second, func() bool {
		r := getRun(t, c, id)
		if r.Held == nil {
			return false
		}
		require.Equal(t, protocol.RunStatusQueued, r.Status)
		require.Nil(t, r.WakeAt, "a held run shows no wake time")
		held = *r.Held
		return true
	}, "held run "+id)
	return held
}

func awaitRunResult(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunResult {
	t.Helper()
	resp, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), "run %s did not finish in 30s: %s", id, resp.Body)
	return *resp.JSON200
}

func queueOf(t *testing.T, c *protocol.ClientWithResponses, name string) protocol.FunctionQueue {
	t.Helper()
	resp, err := c.GetFunctionQueueWithResponse(t.Context(), name)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

// TestConcurrencyLimit: a function with a limit of 1 runs one run at a time; the next
// is held (queued, with its reason, shown by the queue endpoint) and starts as soon as
// the slot frees, whether the run ends, is cancelled, or suspends; a held run that is
// cancelled gives its place in line to the next.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	g := newGates()
	app := s.NewApp()
	g.register(app, "one", functions.Concurrency(1, ""))
	s.Sync(t, s.ServeApp(t, app))

	a := startAsync(t, c, "one", `{}`)
	require.Equal(t, a, g.awaitEntered(t))
	b := startAsync(t, c, "one", `{}`)
	require.Equal(t, "waiting for one of the function's 1 concurrency slots", awaitHeld(t, c, b))
	cc := startAsync(t, c, "one", `{}`)
	awaitHeld(t, c, cc)
	d := startAsync(t, c, "one", `{}`)
	awaitHeld(t, c, d)
	g.requireNoneEntered(t)

	q := queueOf(t, c, "one")
	require.Equal(t, "one", q.Function)
	require.Equal(t, 1, q.Running)
	require.Equal(t, 3, q.Queued)
	require.Equal(t, 3, q.Held)
	require.Equal(t, []protocol.QueueKey{{Key: "", Running: 1, Limit: 1, Held: 3}}, q.Keys)
	require.Equal(t, []protocol.HeldReason{{Reason: "waiting for one of the function's 1 concurrency slots", Runs: 3}}, q.Reasons)

	// The run ends: the oldest held one starts.
	g.release(a)
	require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, c, a).Status)
	require.Equal(t, b, g.awaitEntered(t), "the oldest held run starts first")
	ra, rb := getRun(t, c, a), getRun(t, c, b)
	require.False(t, rb.StartedAt.Before(*ra.FinishedAt), "b started once a had finished")
	require.Nil(t, rb.Held, "a claim clears held")

	// Until now one handler at most ran at once. (A cancel below gives the running
	// run's slot back at once, while its handler may still be returning: a limit
	// counts runs, not handlers.)
	require.LessOrEqual(t, g.max.Load(), int32(1))

	// A held run cancelled leaves the line; a running one cancelled frees its slot.
	resp, err := c.CancelRunWithResponse(t.Context(), cc)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	g.requireNoneEntered(t)
	resp, err = c.CancelRunWithResponse(t.Context(), b)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, d, g.awaitEntered(t), "cancelling the running run started the next held one")
	g.release(d)
	require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, c, d).Status)

	q = queueOf(t, c, "one")
	require.Zero(t, q.Running)
	require.Zero(t, q.Held)
	require.Empty(t, q.Keys, "no slot is left taken")
}

// TestConcurrencyKeys: a keyed limit holds per key value (key a full does not hold key
// b), several limits combine (a run needs a slot of each), and another tenant's runs of
// a function of the same name have slots of their own.
func TestConcurrencyKeys(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "tenant-b", Roles: []string{"admin"}}))
	g := newGates()
	app := s.NewApp()
	g.register(app, "per-customer", functions.Concurrency(2, ""), functions.Concurrency(1, "input.customer_id"))
	url := s.ServeApp(t, app)
	s.Sync(t, url)
	resp, err := other.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))

	a1 := startAsync(t, c, "per-customer", `{"customer_id":"a"}`)
	require.Equal(t, a1, g.awaitEntered(t))
	a2 := startAsync(t, c, "per-customer", `{"customer_id":"a"}`)
	require.Equal(t, "waiting for a concurrency slot of key input.customer_id=a (limit 1)", awaitHeld(t, c, a2))
	b1 := startAsync(t, c, "per-customer", `{"customer_id":"b"}`)
	require.Equal(t, b1, g.awaitEntered(t), "key a full does not hold key b")
	c1 := startAsync(t, c, "per-customer", `{"customer_id":"c"}`)
	require.Equal(t, "waiting for one of the function's 2 concurrency slots", awaitHeld(t, c, c1), "the function-wide limit holds too")

	// Tenant b's runs of its own per-customer, same key, are not held by tenant a's.
	o1 := startAsync(t, other, "per-customer", `{"customer_id":"a"}`)
	require.Equal(t, o1, g.awaitEntered(t))
	require.Nil(t, getRun(t, other, o1).Held)
	q := queueOf(t, other, "per-customer")
	require.Equal(t, 1, q.Running)
	require.Zero(t, q.Held, "tenant b sees none of tenant a's runs")
	g.requireNoneEntered(t)

	// Without runs:read the key values are masked.
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "fn", Tenant: auth.DefaultTenant, Roles: []string{"functions:read"}}))
	q = queueOf(t, viewer, "per-customer")
	require.Equal(t, 2, q.Running)
	require.Equal(t, 2, q.Held)
	for _, k := range q.Keys {
		require.NotContains(t, k.Key, "=a", "a key value is masked")
	}
	for _, r := range q.Reasons {
		require.NotContains(t, r.Reason, "=a ", "a key value is masked")
	}
	full := queueOf(t, c, "per-customer")
	require.Contains(t, full.Keys, protocol.QueueKey{Key: "input.customer_id=a", Running: 1, Limit: 1, Held: 1})

	// b1 ends: its function-wide slot goes to c1 (key c is free); a2 waits for a1.
	g.release(b1)
	require.Equal(t, c1, g.awaitEntered(t))
	g.release(a1)
	require.Equal(t, a2, g.awaitEntered(t))
	for _, id := range []string{c1, a2} {
		g.release(id)
	}
	g.release(o1)
	for _, id := range []string{a1, a2, b1, c1} {
		require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, c, id).Status)
	}
	require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, other, o1).Status)
}

// TestConcurrencyWait: a run started with ?wait over the limit is created held and the
// request still answers its result once a slot frees and it runs.
func TestConcurrencyWait(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	g := newGates()
	app := s.NewApp()
	g.register(app, "one", functions.Concurrency(1, ""))
	s.Sync(t, s.ServeApp(t, app))

	// With a free slot, ?wait runs at once and answers 200.
	done := make(chan *protocol.StartRunResponse, 1)
	go func() {
		resp, _ := c.StartRunWithBodyWithResponse(context.WithoutCancel(t.Context()), "one",
			&protocol.StartRunParams{Wait: ptr("30s")}, "application/json", strings.NewReader(`{"customer_id":"x"}`))
		done <- resp
	}()
	first := g.awaitEntered(t)
	go func() {
		resp, _ := c.StartRunWithBodyWithResponse(context.WithoutCancel(t.Context()), "one",
			&protocol.StartRunParams{Wait: ptr("30s")}, "application/json", strings.NewReader(`{"customer_id":"y"}`))
		done <- resp
	}()
	var second string
	waitUntil(t, 30*time.Second, func() bool {
		list, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("one"), Status: ptr(protocol.RunStatusQueued)})
		require.NoError(t, err)
		for _, r := range list.JSON200.Runs {
			if r.Held != nil {
				second = r.ID
				return true
			}
		}
		return false
	}, "the second run held")
	g.requireNoneEntered(t)
	g.release(first)
	r := <-done
	require.NotNil(t, r)
	require.Equal(t, http.StatusOK, r.StatusCode(), string(r.Body))
	require.JSONEq(t, `"done x"`, string(*r.JSON200.Output))
	require.Equal(t, second, g.awaitEntered(t))
	g.release(second)
	r = <-done
	require.NotNil(t, r)
	require.Equal(t, http.StatusOK, r.StatusCode(), string(r.Body))
	require.Equal(t, second, r.JSON200.ID)
	require.JSONEq(t, `"done y"`, string(*r.JSON200.Output), "the held ?wait request answered the result")
}

// TestConcurrencySuspendedHoldsNoSlot: a run that waits (for an event) holds no slot; it
// takes one again to resume.
func TestConcurrencySuspendedHoldsNoSlot(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	app := s.NewApp()
	functions.Register(app, "waiter", func(ctx context.Context, in struct {
		Wait bool `json:"wait"`
	}) (string, error) {
		if !in.Wait {
			return "quick", nil
		}
		if _, err := step.WaitForEvent[map[string]any](ctx, "go", "go.ahead", step.Timeout(time.Hour)).Get(); err != nil {
			return "", err
		}
		return "resumed", nil
	}, functions.Concurrency(1, ""))
	s.Sync(t, s.ServeApp(t, app))

	waiting := startAsync(t, c, "waiter", `{"wait":true}`)
	waitUntil(t, 30*time.Second, func() bool { return getRun(t, c, waiting).Status == protocol.RunStatusSuspended }, "the run waiting")
	quick := mustComplete(t, c, "waiter", `{}`)
	require.JSONEq(t, `"quick"`, string(*quick.Output), "a suspended run holds no slot")
	ev, err := c.SendEventWithResponse(t.Context(), protocol.SendEventJSONRequestBody{Name: "go.ahead"})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, ev.StatusCode(), string(ev.Body))
	res := awaitRunResult(t, c, waiting)
	require.JSONEq(t, `"resumed"`, string(*res.Output))
	require.Empty(t, queueOf(t, c, "waiter").Keys)
}

// TestConcurrencyBadConfig: a limit that cannot hold is refused at registration, naming
// the field.
func TestConcurrencyBadConfig(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	lim := func(n int, key string) protocol.ConcurrencyLimit {
		l := protocol.ConcurrencyLimit{Limit: n}
		if key != "" {
			l.Key = &key
		}
		return l
	}
	for _, tt := range []struct {
		limits []protocol.ConcurrencyLimit
		want   string
	}{
		{[]protocol.ConcurrencyLimit{lim(1, ""), lim(1, "input.")}, `config.concurrency[1].key "input." is not a key`},
		{[]protocol.ConcurrencyLimit{lim(1, "customer_id")}, `config.concurrency[0].key "customer_id" is not a key`},
		{[]protocol.ConcurrencyLimit{lim(1, "identity.roles")}, `config.concurrency[0].key`},
		{[]protocol.ConcurrencyLimit{lim(1, "input.a b")}, `config.concurrency[0].key`},
		{[]protocol.ConcurrencyLimit{lim(0, "")}, "config.concurrency[0].limit 0 is not between 1 and 100000"},
		{[]protocol.ConcurrencyLimit{lim(1, ""), lim(100001, "input.x")}, "config.concurrency[1].limit 100001 is not between 1 and 100000"},
		{[]protocol.ConcurrencyLimit{lim(1, ""), lim(2, "input.x"), lim(3, "input.y")}, "config.concurrency has 3 limits, more than the limit of 2"},
		{[]protocol.ConcurrencyLimit{lim(1, "input.x"), lim(2, "input.x")}, "config.concurrency[1].key repeats the key of config.concurrency[0]"},
		{[]protocol.ConcurrencyLimit{lim(1, ""), lim(2, "")}, "config.concurrency[1].key repeats"},
	} {
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "bad", protocol.FunctionRegistration{
			URL: "http://127.0.0.1:1/bad", Config: &protocol.FunctionConfig{Concurrency: &tt.limits}})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON400.Detail, tt.want)
	}
	for _, ok := range []string{"input.customer_id", "input.order.items.0.sku", "identity.subject", "identity.tenant", "identity.claims.org"} {
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "good", protocol.FunctionRegistration{
			URL: "http://127.0.0.1:1/good", Config: &protocol.FunctionConfig{Concurrency: &[]protocol.ConcurrencyLimit{lim(3, ok)}}})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), "%s: %s", ok, resp.Body)
	}
	q, err := c.GetFunctionQueueWithResponse(t.Context(), "nope")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, q.StatusCode())
}

// TestConcurrencyAcrossGateways: two gateways on one database start many runs of a
// function with a limit whose endpoint is slow and counts its calls in flight: never
// more than the limit run at once, and every run completes. A limit of 3 is counted in
// one row; a limit of 64 is counted from the running runs (docs/concurrency.md): fast claims
// below 32 running, exact ones above.
func TestConcurrencyAcrossGateways(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ limit, runs int }{{3, 40}, {64, 100}} {
		t.Run(fmt.Sprintf("Limit%d", tt.limit), func(t *testing.T) {
			t.Parallel()
			concurrencyAcrossGateways(t, tt.limit, tt.runs)
		})
	}
}

// concurrencyAcrossGateways starts runs runs of a function limited to limit. When runs
// is more than twice the limit, each call takes 20 ms; else the calls wait until the
// limit is reached and every other run is held, so that the limit is surely met.
func concurrencyAcrossGateways(t *testing.T, limit, runs int) {
	dbURL := pgtest.DBURL(t)
	a := stack.Start(t, stack.Options{DatabaseURL: dbURL})
	b := stack.Start(t, stack.Options{DatabaseURL: dbURL})
	var now, most, calls atomic.Int32
	gated := runs <= 2*limit
	gate := make(chan struct{})
	app := a.NewApp()
	functions.Register(app, "slow", func(ctx context.Context, _ struct{}) (int, error) {
		n := now.Add(1)
		defer now.Add(-1)
		calls.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if gated {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		} else {
			time.Sleep(20 * time.Millisecond) // the function's own work
		}
		return int(n), nil
	}, functions.Concurrency(limit, ""))
	a.Sync(t, a.ServeApp(t, app))
	ca, cb := a.Client(t, a.Token), b.Client(t, b.Token)

	ids := make([]string, runs)
	failed := make([]string, runs) // why run i has no id
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, params := ca, &protocol.StartRunParams{}
			if i%2 == 1 {
				c = cb
			}
			if i%4 < 2 && !gated {
				params.Wait = ptr("30s") // half of them the ?wait way
			}
			resp, err := c.StartRunWithBodyWithResponse(context.WithoutCancel(t.Context()), "slow", params, "application/json", strings.NewReader(`{}`))
			switch {
			case err != nil:
				failed[i] = err.Error()
			case resp.JSON200 != nil:
				ids[i] = resp.JSON200.ID
			case resp.JSON202 != nil:
				ids[i] = resp.JSON202.ID
			default:
				failed[i] = fmt.Sprintf("HTTP %d: %s", resp.StatusCode(), resp.Body)
			}
		}()
	}
	wg.Wait()
	if gated {
		eventually(t, 30*time.Second, "the limit's runs running and the others held", func() bool {
			q := queueOf(t, ca, "slow")
			return now.Load() == int32(limit) && q.Held == runs-limit
		})
		close(gate)
	}
	for i, id := range ids {
		require.NotEmpty(t, id, "run %d was not started: %s", i, failed[i])
		c := ca
		if i%2 == 1 {
			c = cb
		}
		require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, c, id).Status)
	}
	t.Logf("%d calls for %d runs; at most %d in flight", calls.Load(), runs, most.Load())
	require.LessOrEqual(t, most.Load(), int32(limit), "never more than the limit at once")
	require.Equal(t, int32(runs), calls.Load(), "each run was invoked once")
	require.Empty(t, queueOf(t, ca, "slow").Keys, "every slot was given back")
}

// TestConcurrencySurvivesACrash: a gateway that dies while its run holds the only slot
// does not keep it past the run's lease: another gateway's lease reaper requeues the
// run, which frees the slot, and both that run and the one held behind it complete.
func TestConcurrencySurvivesACrash(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DBURL(t)
	a := stack.Start(t, stack.Options{DatabaseURL: dbURL, LeaseTTL: 500 * time.Millisecond})
	var calls atomic.Int32
	entered, stuck := make(chan string, 4), make(chan struct{})
	app := a.NewApp()
	functions.Register(app, "solo", func(ctx context.Context, _ struct{}) (string, error) {
		entered <- functions.RunFrom(ctx).ID
		if calls.Add(1) == 1 {
			select { // the first call hangs with its dying gateway
			case <-stuck:
			case <-ctx.Done():
			}
			return "", fmt.Errorf("never answered")
		}
		return "ok", nil
	}, functions.Concurrency(1, ""), functions.InvocationTimeout(time.Minute))
	a.Sync(t, a.ServeApp(t, app))
	t.Cleanup(func() { close(stuck) }) // before the app's server closes
	ca := a.Client(t, a.Token)

	first := startAsync(t, ca, "solo", `{}`)
	select {
	case id := <-entered:
		require.Equal(t, first, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the first run did not start")
	}
	second := startAsync(t, ca, "solo", `{}`)
	awaitHeld(t, ca, second)

	// Gateway a dies: it renews no lease and hears nothing more.
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	go func() { _ = a.Invoker.Stop(dead) }()

	b := stack.Start(t, stack.Options{DatabaseURL: dbURL, LeaseTTL: 500 * time.Millisecond, MaintainInterval: 50 * time.Millisecond})
	cb := b.Client(t, b.Token)
	for _, id := range []string{first, second} {
		require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, cb, id).Status)
	}
	require.Equal(t, 2, getRun(t, cb, first).Invocations, "the first run was recovered from its lapsed lease and invoked again")
	require.Equal(t, 1, getRun(t, cb, second).Invocations)
	require.Empty(t, queueOf(t, cb, "solo").Keys, "no slot leaked")
}
