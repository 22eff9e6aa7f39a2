package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol/signature"
)

// The functions of the suite's app. chain runs its steps one after another; the fault
// functions misbehave in the transport, where an SDK cannot help (the first five), or
// crash between a step's side effect and its checkpoint.
const (
	fnChain      = "chain"             // input chainInput: steps s1..sN, each sleeping step_ms
	fnPatient    = "chain.patient"     // chain with a timeout of 60s
	fnTick       = "tick"              // one step; started by a schedule
	fnNap        = "nap"               // step "before", a durable sleep of napFor, step "after"
	fnAwait      = "await"             // input awaitInput: waits for event paidEvent with data.key = key, then step "after"
	fnMailbox    = "mailbox"           // receives a message of topic goTopic, then step "after"
	fnParent     = "parent"            // invokes a child run of chain (shortRun), then step "after"
	fnHTTP500    = "fault.http500"     // answers HTTP 500
	fnGarbage    = "fault.garbage"     // answers 200 with a body that is not JSON
	fnHang       = "fault.hang"        // never answers; its timeout is 1s
	fnCloseEarly = "fault.close_early" // reads the request, then closes the connection
	fnCloseMid   = "fault.close_mid"   // starts a 200 answer, then closes the connection
	fnCrash      = "fault.crash"       // step "charge" records its side effect, then the process "dies" (first invocation only)
)

// chainTimeout is chain's invocation timeout: the 10s in the long suite, and 20s
// in the short one, which runs beside the whole test suite with race-detecting gateways
// on a 2-core CI machine, where a 3-step run's invocation was seen to take 8s.
var chainTimeout = size(20*time.Second, 10*time.Second)

// napFor is how long a run of nap sleeps (durably: the run is suspended meanwhile).
const napFor = 500 * time.Millisecond

// paidEvent is the event a run of await waits for, for up to awaitFor.
const (
	paidEvent = "chaos.paid"
	awaitFor  = 2 * time.Minute
)

// awaitInput is await's input.
type awaitInput struct {
	Key string `json:"key"`
}

// hangTimeout is fault.hang's invocation timeout.
const hangTimeout = time.Second

// chainInput is chain's input.
type chainInput struct {
	Steps  int `json:"steps"`
	StepMS int `json:"step_ms"`
}

// app is the function app of one scenario: the SDK's App behind a recording front, served
// on a loopback port of its own, with a recorder of everything it saw.
type app struct {
	rec       *recorder
	sdk       *functions.App
	url       string // ends in "/"
	gatewayAt func(hostport string) string
}

// newApp serves the suite's functions for f's gateways and registers them through the
// API (POST /v1/apps, which reads the app's signed manifest). The app verifies every
// request with the tenant's public keys, fetched from whichever gateway answers.
func newApp(t *testing.T, f *fleet) *app {
	t.Helper()
	a := &app{rec: &recorder{}, gatewayAt: f.gatewayAt}
	var keyFuncs []signature.KeyFunc
	for _, g := range f.gws {
		k, err := functions.GatewayKeys(g.url, f.token, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		keyFuncs = append(keyFuncs, k)
	}
	a.sdk = functions.New(functions.Config{
		// The checks read each invocation's number from its checkpoint token, which a
		// duplex invocation does not have.
		RequestResponseOnly: true,
		Keys: func(ctx context.Context, tenant string, refresh bool) (signature.Keys, error) {
			var errs []error
			for _, k := range keyFuncs {
				keys, err := k(ctx, tenant, refresh)
				if err == nil {
					return keys, nil
				}
				errs = append(errs, err)
			}
			return signature.Keys{}, errors.Join(errs...)
		},
		Tenant:     tenant,
		HTTPClient: &http.Client{Transport: &ackTransport{base: checkpointTransport(), app: a}, Timeout: 30 * time.Second},
		Logger:     slog.New(slog.DiscardHandler),
	})
	functions.Register(a.sdk, fnChain, a.chain, functions.InvocationTimeout(chainTimeout))
	functions.Register(a.sdk, fnPatient, a.chain, functions.InvocationTimeout(6*chainTimeout))
	functions.Register(a.sdk, fnTick, a.tick, functions.InvocationTimeout(chainTimeout))
	functions.Register(a.sdk, fnNap, a.nap, functions.InvocationTimeout(chainTimeout))
	functions.Register(a.sdk, fnAwait, a.await, functions.InvocationTimeout(chainTimeout))
	functions.Register(a.sdk, fnMailbox, a.mailbox, functions.InvocationTimeout(chainTimeout))
	functions.Register(a.sdk, fnParent, a.parent, functions.InvocationTimeout(chainTimeout))
	faulty := []functions.Option{functions.InvocationAttempts(3), functions.InvocationBackoff(100*time.Millisecond, 200*time.Millisecond)}
	for _, name := range []string{fnHTTP500, fnGarbage, fnCloseEarly, fnCloseMid} {
		functions.Register(a.sdk, name, a.unreachable, append(faulty, functions.InvocationTimeout(chainTimeout))...)
	}
	functions.Register(a.sdk, fnHang, a.unreachable, append(faulty, functions.InvocationTimeout(hangTimeout))...)
	functions.Register(a.sdk, fnCrash, a.crash, append(faulty, functions.InvocationTimeout(chainTimeout))...)

	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	a.url = "http://" + ln.Addr().String() + "/"

	if err := f.callOK(t.Context(), f.gws[0], http.MethodPost, "/v1/apps", map[string]string{"url": a.url}, nil); err != nil {
		t.Fatalf("register the app: %v", err)
	}
	return a
}

func checkpointTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.DisableCompression = true
	return tr
}

// invocation is one request of a gateway to the app, as the app saw it.
type invocation struct {
	runID, function string
	attempt         int    // run.attempt in the request
	invocation      int    // the invocation number its checkpoint token carries (else attempt)
	gateway         string // the gateway that called, from the request's checkpoint URL
	start           time.Time

	mu     sync.Mutex
	end    time.Time // when the app's handler returned
	status int       // the HTTP status the app answered; 0: none (connection closed)
}

func (i *invocation) ended() (time.Time, int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.end, i.status
}

// execution is one run of a step's function (its side effect).
type execution struct {
	runID, step string
	invocation  int
	gateway     string
	at          time.Time
}

// ack is a checkpoint the gateway acknowledged with HTTP 200.
type ack struct {
	runID   string
	seq     int
	name    string
	gateway string
	at      time.Time
}

// recorder keeps what the app saw, in memory.
type recorder struct {
	mu       sync.Mutex
	invs     []*invocation
	execs    []execution
	acks     []ack
	refusals map[string]int // checkpoints not acknowledged, by what the gateway answered
}

func (r *recorder) invocations() []*invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*invocation{}, r.invs...)
}

func (r *recorder) executions() []execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]execution{}, r.execs...)
}

func (r *recorder) acked() []ack {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ack{}, r.acks...)
}

type invocationKey struct{}

// ServeHTTP records each invocation, then answers it with the SDK or, for the transport
// fault functions, with the fault.
func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path == "/" {
		a.sdk.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the gateway went away
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Run struct {
			ID       string `json:"id"`
			Function string `json:"function"`
			Attempt  int    `json:"attempt"`
		} `json:"run"`
		Checkpoint struct {
			URL   string `json:"url"`
			Token string `json:"token"`
		} `json:"checkpoint"`
	}
	_ = json.Unmarshal(body, &req) // the SDK answers what does not parse
	inv := &invocation{
		runID: req.Run.ID, function: req.Run.Function, attempt: req.Run.Attempt,
		invocation: tokenInvocation(req.Checkpoint.Token, req.Run.Attempt),
		gateway:    a.gatewayAt(hostOf(req.Checkpoint.URL)), start: time.Now(),
	}
	a.rec.mu.Lock()
	a.rec.invs = append(a.rec.invs, inv)
	a.rec.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	// Deferred, so that it also runs when fault.crash's handler goroutine exits.
	defer func() {
		inv.mu.Lock()
		inv.end, inv.status = time.Now(), sw.status
		inv.mu.Unlock()
	}()
	r = r.WithContext(context.WithValue(r.Context(), invocationKey{}, inv))

	switch strings.TrimPrefix(r.URL.Path, "/") {
	case fnHTTP500:
		sw.Header().Set("Content-Type", "application/json")
		sw.WriteHeader(http.StatusInternalServerError)
		io.WriteString(sw, `{"type":"chaos","message":"an injected HTTP 500"}`)
	case fnGarbage:
		sw.Header().Set("Content-Type", "text/html")
		sw.WriteHeader(http.StatusOK)
		io.WriteString(sw, "<html><body>502 Bad Gateway (not a protocol answer)</body></html>")
	case fnHang:
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	case fnCloseEarly:
		// Accept the request, then close the connection without a byte of answer.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case fnCloseMid:
		// Start a 200 answer whose body stops halfway, then close the connection.
		if conn, buf, err := http.NewResponseController(w).Hijack(); err == nil {
			closeMidAnswer(buf)
			conn.Close()
		}
	default:
		a.sdk.ServeHTTP(sw, r)
	}
}

func closeMidAnswer(buf *bufio.ReadWriter) {
	const part = `{"status":"completed","out`
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", 4*len(part), part)
	buf.Flush()
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// tokenInvocation reads the invocation number from a checkpoint token
// (<key id>.<run id>.<invocation>.<expiry>.<mac>), the fencing number that the journal's
// invocation column holds; def when the token does not have that form.
func tokenInvocation(token string, def int) int {
	parts := strings.Split(token, ".")
	if len(parts) == 5 {
		if n, err := strconv.Atoi(parts[2]); err == nil {
			return n
		}
	}
	return def
}

func hostOf(rawURL string) string {
	rest, ok := strings.CutPrefix(rawURL, "http://")
	if !ok {
		return rawURL
	}
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// executed records that the step called name runs now, in the invocation of ctx.
func (a *app) executed(ctx context.Context, name string) {
	e := execution{step: name, at: time.Now()}
	if inv, _ := ctx.Value(invocationKey{}).(*invocation); inv != nil {
		e.runID, e.invocation, e.gateway = inv.runID, inv.invocation, inv.gateway
	}
	a.rec.mu.Lock()
	a.rec.execs = append(a.rec.execs, e)
	a.rec.mu.Unlock()
}

// chain runs steps s1..sN, each sleeping step_ms (cut short when the invocation ends).
func (a *app) chain(ctx context.Context, in chainInput) (int, error) {
	for i := 1; i <= in.Steps; i++ {
		name := "s" + strconv.Itoa(i)
		_, err := step.Run(ctx, name, func(ctx context.Context) (int, error) {
			a.executed(ctx, name)
			if in.StepMS > 0 {
				t := time.NewTimer(time.Duration(in.StepMS) * time.Millisecond)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-t.C:
				}
			}
			return i, nil
		})
		if err != nil {
			return 0, err
		}
	}
	return in.Steps, nil
}

func (a *app) tick(ctx context.Context, _ any) (bool, error) {
	return step.Run(ctx, "tock", func(ctx context.Context) (bool, error) {
		a.executed(ctx, "tock")
		return true, nil
	})
}

// nap runs step "before", sleeps napFor durably, and runs step "after".
func (a *app) nap(ctx context.Context, _ any) (bool, error) {
	if _, err := a.step(ctx, "before"); err != nil {
		return false, err
	}
	if err := step.Sleep(ctx, "nap", napFor); err != nil {
		return false, err
	}
	return a.step(ctx, "after")
}

// await waits for a paidEvent whose data.key is its input's key, then runs step "after".
// Waiting in vain for awaitFor fails the run.
func (a *app) await(ctx context.Context, in awaitInput) (bool, error) {
	_, err := step.WaitForEvent[awaitInput](ctx, "paid", paidEvent, step.Matching(step.Match{"data.key": in.Key}), step.Timeout(awaitFor)).Get()
	if errors.Is(err, step.ErrTimedOut) {
		return false, step.NonRetryable(errors.New("chaos: no " + paidEvent + " event within " + awaitFor.String()))
	}
	if err != nil {
		return false, err
	}
	return a.step(ctx, "after")
}

// goTopic is the topic a run of mailbox receives.
const goTopic = "chaos.go"

// mailbox receives a message of goTopic (for up to awaitFor), then runs step "after".
func (a *app) mailbox(ctx context.Context, _ any) (bool, error) {
	_, err := step.Receive[map[string]any](ctx, goTopic, step.Timeout(awaitFor)).Get()
	if errors.Is(err, step.ErrTimedOut) {
		return false, step.NonRetryable(errors.New("chaos: no " + goTopic + " message within " + awaitFor.String()))
	}
	if err != nil {
		return false, err
	}
	return a.step(ctx, "after")
}

// parent invokes a child run of chain (shortRun) and waits for its end, then runs step
// "after".
func (a *app) parent(ctx context.Context, _ any) (bool, error) {
	if _, err := step.Invoke[any](ctx, "child", fnChain, shortRun).Get(); err != nil {
		return false, err
	}
	return a.step(ctx, "after")
}

// step runs a step called name that records its execution and does nothing else.
func (a *app) step(ctx context.Context, name string) (bool, error) {
	return step.Run(ctx, name, func(ctx context.Context) (bool, error) {
		a.executed(ctx, name)
		return true, nil
	})
}

// crash's step "charge" makes its side effect, and on the run's first invocation the
// process then "dies" before the step's checkpoint: the handler's goroutine exits
// (runtime.Goexit, which no recover stops), so the connection closes without an answer
// and the entry is never sent. The next invocation runs the step again (at least once
// until journaled) and journals it.
func (a *app) crash(ctx context.Context, _ any) (string, error) {
	id, err := step.Run(ctx, "charge", func(ctx context.Context) (string, error) {
		a.executed(ctx, "charge")
		if functions.RunFrom(ctx).Attempt == 1 {
			runtime.Goexit()
		}
		return "ch_" + functions.RunFrom(ctx).ID, nil
	})
	if err != nil {
		return "", err
	}
	_, err = step.Run(ctx, "ship", func(ctx context.Context) (bool, error) {
		a.executed(ctx, "ship")
		return true, nil
	})
	return id, err
}

func (a *app) unreachable(context.Context, any) (any, error) {
	return nil, step.NonRetryable(errors.New("chaos: the fault is in the transport; the SDK should not be reached"))
}

// ackTransport records the checkpoints that the gateway acknowledged.
type ackTransport struct {
	base http.RoundTripper
	app  *app
}

func (t *ackTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	runID, ok := strings.CutSuffix(strings.TrimPrefix(req.URL.Path, "/v1/runs/"), "/checkpoint")
	if !ok || req.GetBody == nil {
		return t.base.RoundTrip(req)
	}
	var e struct {
		Seq  int    `json:"seq"`
		Name string `json:"name"`
	}
	if body, err := req.GetBody(); err == nil {
		_ = json.NewDecoder(body).Decode(&e)
		body.Close()
	}
	resp, err := t.base.RoundTrip(req)
	rec := t.app.rec
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err == nil && resp.StatusCode == http.StatusOK {
		rec.acks = append(rec.acks, ack{runID: runID, seq: e.Seq, name: e.Name, gateway: t.app.gatewayAt(req.URL.Host), at: time.Now()})
		return resp, err
	}
	if rec.refusals == nil {
		rec.refusals = map[string]int{}
	}
	what := "no answer"
	if err == nil {
		what = "HTTP " + strconv.Itoa(resp.StatusCode)
	} else if errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused") {
		what = "connection refused"
	}
	rec.refusals[what]++
	return resp, err
}
