package functionstest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
	"github.com/stepgate/stepgate/protocol/signature"
)

// MaxInvocations bounds the invocations of one run: past it the test fails, naming the
// run, as a function that never ends would otherwise hang it.
const MaxInvocations = 1000

// defaultInvocationAttempts is the gateway's default of functions.InvocationAttempts.
const defaultInvocationAttempts = 3

// StubFunc answers a child run of a stubbed function: its output (encoded as JSON) or
// its error, which fails the child run (an [*step.Error]'s Type is kept, any other
// error has type "error").
type StubFunc func(input json.RawMessage) (any, error)

// Harness runs the functions of one app against an in-memory journal and a virtual
// clock. Use it from the test's goroutine only.
type Harness struct {
	t     testing.TB
	gw    *gatewaytest.Gateway
	url   string
	now   time.Time
	stubs map[string]StubFunc
	conf  map[string]protocol.FunctionConfig // by function, from the app's manifest
	runs  []*Run
	byID  map[string]*Run
	evs   []awaits.Event

	mu       sync.Mutex // guards now's writes, journals and crashes, used by the checkpoint handler
	journals store
	crashes  map[string]int  // run id -> seq after which its invocation crashes
	crashed  map[string]bool // run id -> its invocation crashed
}

// Option configures a Harness.
type Option func(*options)

type options struct {
	key *signature.SigningKey
	now time.Time
}

// WithKey signs every invocation with key, for an app that verifies signatures (one not
// built with functions.Config.InsecureSkipVerify). The harness's runs are of tenant
// "acme".
func WithKey(key *signature.SigningKey) Option { return func(o *options) { o.key = key } }

// WithNow starts the virtual clock at t instead of the real time at New.
func WithNow(t time.Time) Option { return func(o *options) { o.now = t } }

// New returns a Harness for app, serving it on a loopback server closed in t's Cleanup.
func New(t testing.TB, app *functions.App, opts ...Option) *Harness {
	t.Helper()
	h := serve(t, app, opts)
	r := h.gw.Get(h.url + "/")
	if r.Code != http.StatusOK {
		t.Fatalf("functionstest: the app's manifest answers %d %s (an app that verifies signatures needs functionstest.WithKey)", r.Code, r.Body)
	}
	var m protocol.Manifest
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("functionstest: decode the app's manifest: %v", err)
	}
	for _, f := range m.Functions {
		if f.Config != nil {
			h.conf[f.Name] = *f.Config
		} else {
			h.conf[f.Name] = protocol.FunctionConfig{}
		}
	}
	return h
}

// NewHandler is New for functions served by handler rather than by a *functions.App: a
// function written against the protocol with no SDK, or an app behind a proxy. The
// harness serves handler on a loopback server and invokes each of functions at
// <server URL>/<function> (the request/response mode); it asks for no manifest, so each
// function has the gateway's default config (3 invocation attempts, no triggers).
// Checkpoints go to the request's checkpoint.url with its token, as on the gateway.
func NewHandler(t testing.TB, handler http.Handler, functions []string, opts ...Option) *Harness {
	t.Helper()
	h := serve(t, handler, opts)
	for _, f := range functions {
		h.conf[f] = protocol.FunctionConfig{}
	}
	return h
}

// serve returns a Harness invoking the functions of handler, served on a loopback server
// closed in t's Cleanup.
func serve(t testing.TB, handler http.Handler, opts []Option) *Harness {
	o := options{now: time.Now().UTC()}
	for _, opt := range opts {
		opt(&o)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	h := &Harness{t: t, gw: gatewaytest.New(t, o.key), url: srv.URL, now: o.now.UTC(),
		stubs: map[string]StubFunc{}, conf: map[string]protocol.FunctionConfig{}, byID: map[string]*Run{},
		journals: store{}, crashes: map[string]int{}, crashed: map[string]bool{}}
	h.gw.OnCheckpoint(h.checkpoint)
	return h
}

// Now returns the virtual clock's time.
func (h *Harness) Now() time.Time { return h.now }

// Stub makes fn answer every child run of function (step.Invoke and its kin), instead
// of the app's function of that name if there is one.
func (h *Harness) Stub(function string, fn StubFunc) { h.stubs[function] = fn }

// Advance moves the virtual clock forward by d and wakes, in wake-time order, every
// suspended run whose sleep or wait timeout is due, driving each until it suspends again
// or ends.
func (h *Harness) Advance(d time.Duration) {
	h.t.Helper()
	h.mu.Lock()
	h.now = h.now.Add(max(d, 0))
	h.mu.Unlock()
	for {
		var due []*Run
		for _, r := range h.runs {
			if r.wait != nil && !r.wake.IsZero() && !r.wake.After(h.now) {
				due = append(due, r)
			}
		}
		if len(due) == 0 {
			return
		}
		sort.SliceStable(due, func(i, j int) bool { return due[i].wake.Before(due[j].wake) })
		due[0].timeout()
	}
}

// Start starts a run of function with input (encoded as JSON) and drives it until it
// ends or suspends; Result tells which.
func (h *Harness) Start(function string, input any) *Run {
	h.t.Helper()
	raw, err := json.Marshal(input)
	if err != nil {
		h.t.Fatalf("functionstest: encode the input of %s: %v", function, err)
	}
	r := h.newRun(function, raw, nil, 0)
	r.drive()
	return r
}

func (h *Harness) newRun(function string, input json.RawMessage, parent *Run, seq int) *Run {
	if _, ok := h.conf[function]; !ok {
		h.t.Fatalf("functionstest: the app has no function %q", function)
	}
	r := &Run{h: h, id: newUUID(), function: function, input: input, created: h.now, parent: parent,
		parentSeq: seq, attempts: map[string]int{}, kids: map[int]protocol.JournalEntry{}, evsAtStart: len(h.evs)}
	h.runs = append(h.runs, r)
	h.byID[r.id] = r
	return r
}

// maxAttempts returns how many invocations the gateway makes of function's runs.
func (h *Harness) maxAttempts(function string) int {
	if c := h.conf[function]; c.Retries != nil && c.Retries.MaxAttempts != nil {
		return *c.Retries.MaxAttempts
	}
	return defaultInvocationAttempts
}

// checkpoint answers every checkpoint (gatewaytest checks its token): it journals the
// entry in the harness's journal (a callback's opens it on the virtual clock). For a
// run armed with CrashAfter at the entry's seq it answers 401 once the entry is
// journaled, so that the invocation ends without running anything more (the harness
// drops its answer).
func (h *Harness) checkpoint(runID string, e protocol.JournalEntry) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	code, body := h.journal(runID, e)
	if seq, armed := h.crashes[runID]; !armed || e.Seq != seq || code != http.StatusOK {
		return code, body
	}
	delete(h.crashes, runID)
	h.crashed[runID] = true
	return http.StatusUnauthorized, problem(http.StatusUnauthorized, "functionstest: the process crashed (CrashAfter)")
}

// problem returns the problem body of a refused checkpoint: a conflict is the SDK's
// nondeterminism.
func problem(code int, msg string) string {
	p := protocol.Problem{Status: code, Title: http.StatusText(code), Detail: msg}
	if code == http.StatusConflict {
		p.Type = new("nondeterminism")
	}
	return string(mustJSON(p))
}

// journal journals e for run runID as the checkpoint endpoint does and returns the
// answer. h.mu is held.
func (h *Harness) journal(runID string, e protocol.JournalEntry) (int, string) {
	if e.Kind == protocol.EntryKindCallback {
		return h.openCallback(runID, e)
	}
	if code, msg := h.appendEntry(runID, e); code != http.StatusOK {
		return code, problem(code, msg)
	}
	stored, _ := h.entryAt(runID, e.Seq)
	return http.StatusOK, string(mustJSON(protocol.CheckpointAck{Seq: e.Seq, Until: stored.Until}))
}

// takeCrash reports whether run runID's last invocation crashed, and forgets it.
func (h *Harness) takeCrash(runID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.crashed[runID]
	delete(h.crashed, runID)
	return c
}

// crashSeq returns the seq a crash of run runID is armed at, if any.
func (h *Harness) crashSeq(runID string) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seq, ok := h.crashes[runID]
	return seq, ok
}

func (h *Harness) disarm(runID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.crashes, runID)
}

// waiting returns the runs suspended on a wait, in start order.
func (h *Harness) waiting() []*Run {
	return slices.DeleteFunc(slices.Clone(h.runs), func(r *Run) bool { return r.wait == nil })
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// DefaultCallbackTimeout is how long a callback stays open when step.Timeout does not
// say, as on the gateway.
const DefaultCallbackTimeout = 7 * 24 * time.Hour

// openCallback journals a callback entry as the gateway does, with its URL, its token and
// its expiry on the virtual clock (the step.Timeout it asks for, or
// DefaultCallbackTimeout), and answers its acknowledgement; a repeat answers the first.
// h.mu is held.
func (h *Harness) openCallback(runID string, e protocol.JournalEntry) (int, string) {
	if old, ok := h.entryAt(runID, e.Seq); ok && old.Kind == e.Kind && old.Name == e.Name {
		return http.StatusOK, string(mustJSON(protocol.CheckpointAck{Seq: e.Seq, Output: old.Output}))
	}
	timeout := DefaultCallbackTimeout
	if e.Output != nil {
		var asked struct{ Timeout string }
		_ = json.Unmarshal(*e.Output, &asked)
		if d, err := time.ParseDuration(asked.Timeout); err == nil && d > 0 {
			timeout = d
		}
	}
	token := fmt.Sprintf("cb-%s-%d", runID, e.Seq)
	out := mustJSON(map[string]any{"url": h.url + "/v1/callbacks/" + token, "token": token,
		"expires_at": h.now.Add(timeout)})
	e.Output = (*protocol.AnyJSON)(&out)
	if code, msg := h.appendEntry(runID, e); code != http.StatusOK {
		return code, problem(code, msg)
	}
	return http.StatusOK, string(mustJSON(protocol.CheckpointAck{Seq: e.Seq, Output: e.Output}))
}
