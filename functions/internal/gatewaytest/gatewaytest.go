// Package gatewaytest is a fake stepgate gateway for the SDK's tests: a real HTTP
// checkpoint endpoint that records entries, and a client that signs invocations and can
// drive a run through suspensions the way the gateway does, without waiting.
package gatewaytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
	"github.com/stepgate/stepgate/protocol/signature"
)

// CheckpointFunc decides the answer to a checkpoint of e for run runID; code 0 lets the
// gateway journal it as usual.
type CheckpointFunc func(runID string, e protocol.JournalEntry) (code int, body string)

// Gateway records the entries checkpointed per run. It is safe for concurrent use.
type Gateway struct {
	Key *signature.SigningKey // Signs invocations for Tenant; nil sends no signature.

	tb      testing.TB
	srv     *httptest.Server
	mu      sync.Mutex
	journal map[string][]protocol.JournalEntry
	streams map[string]*stream // by run id and key
	hook    CheckpointFunc
	deliver func(runID string, aw protocol.Await) json.RawMessage
	receive func(runID string, aw protocol.Await) json.RawMessage
	resolve func(runID string, aw protocol.Await) json.RawMessage
	stale   map[string]bool // runs whose invocations no longer own them (Supersede)
	current map[string]int  // checks that an invocation owns its run, per run
	calls   map[string]int  // requests to the checkpoint URL or under it, per run
}

// Calls returns how many requests the invocations of run runID made to their checkpoint
// URL or under it (checkpoints, checks that they own the run, stream writes), answered
// or not.
func (g *Gateway) Calls(runID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[runID]
}

// Supersede makes every later check that an invocation of run runID owns it (POST
// checkpoint.url + "/current") answer 409 superseded, as the gateway does once the run
// finished or moved on to another invocation, or another process claimed the invocation.
// Checkpoints are still taken: a copy of an invocation request checkpoints under the
// original's token.
func (g *Gateway) Supersede(runID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stale[runID] = true
}

// CurrentChecks returns how many times the invocations of run runID asked whether they
// own it.
func (g *Gateway) CurrentChecks(runID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.current[runID]
}

// OnReceive makes Run journal what f returns for each receive await (the output of a
// receive entry: {"message": {...}} or {"timed_out": true}); without it, every receive
// times out at once.
func (g *Gateway) OnReceive(f func(runID string, aw protocol.Await) json.RawMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.receive = f
}

// OnCallback makes Run journal what f returns for each await_callback await (the output
// of an await_callback entry: {"data": ...}, {"error": {...}} or {"timed_out": true});
// without it, every callback wait times out at once.
func (g *Gateway) OnCallback(f func(runID string, aw protocol.Await) json.RawMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolve = f
}

// OnWaitEvent makes Run journal what f returns for each wait_event and wait_any await
// (the output of its entry: {"event": {...}}, {"index": i, "kind": ..., "output": ...}
// or {"timed_out": true}); without it, every such wait times out at once.
func (g *Gateway) OnWaitEvent(f func(runID string, aw protocol.Await) json.RawMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deliver = f
}

// stream is a run's stream as the gateway keeps it: chunks in order, each once per
// place.
type stream struct {
	chunks []json.RawMessage
	places map[[3]int]bool // seq, attempt, index
	closed bool
}

// Tenant is the tenant of the runs a Gateway invokes.
const Tenant = "acme"

// New starts a Gateway, closed in tb's Cleanup.
func New(tb testing.TB, key *signature.SigningKey) *Gateway {
	g := &Gateway{Key: key, tb: tb, journal: map[string][]protocol.JournalEntry{}, streams: map[string]*stream{},
		stale: map[string]bool{}, current: map[string]int{}, calls: map[string]int{}}
	g.srv = httptest.NewServer(http.HandlerFunc(g.checkpoint))
	tb.Cleanup(g.srv.Close)
	return g
}

// OnCheckpoint makes f decide the answers to checkpoints.
func (g *Gateway) OnCheckpoint(f CheckpointFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hook = f
}

// Journal returns the entries of run runID so far.
func (g *Gateway) Journal(runID string) []protocol.JournalEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]protocol.JournalEntry(nil), g.journal[runID]...)
}

// Stream returns the chunks of run runID's stream key so far, and whether it is closed.
func (g *Gateway) Stream(runID, key string) ([]json.RawMessage, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.streams[runID+"\n"+key]
	if st == nil {
		return nil, false
	}
	return append([]json.RawMessage(nil), st.chunks...), st.closed
}

func (g *Gateway) checkpoint(w http.ResponseWriter, r *http.Request) {
	if id, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/checkpoint"); ok {
		g.mu.Lock()
		g.calls[id]++
		g.mu.Unlock()
	}
	if strings.HasSuffix(r.URL.Path, "/checkpoint/stream") {
		g.writeStream(w, r)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/checkpoint/current") {
		runID := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/checkpoint/current")
		if r.Header.Get("Authorization") != "Bearer "+token(runID) {
			problem(w, http.StatusUnauthorized, "", "bad invocation token")
			return
		}
		var c protocol.InvocationClaim
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || !validNonce(c.Nonce) {
			problem(w, http.StatusBadRequest, "", "nonce must be 32 lowercase hex digits (128 random bits)")
			return
		}
		g.mu.Lock()
		g.current[runID]++
		stale := g.stale[runID]
		g.mu.Unlock()
		if stale {
			problem(w, http.StatusConflict, "superseded", "this invocation no longer owns the run (it was cancelled, finished, or retried elsewhere): stop")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"run_id":"`+runID+`"}`)
		return
	}
	runID := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/checkpoint")
	if r.Header.Get("Authorization") != "Bearer "+token(runID) {
		problem(w, http.StatusUnauthorized, "", "bad invocation token")
		return
	}
	var e protocol.JournalEntry
	if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
		problem(w, http.StatusBadRequest, "", err.Error())
		return
	}
	g.mu.Lock()
	hook := g.hook
	g.mu.Unlock()
	if hook != nil {
		if code, body := hook(runID, e); code != 0 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(code)
			_, _ = io.WriteString(w, body)
			return
		}
	}
	if e.Kind == protocol.EntryKindCallback {
		// The gateway makes the token and the URL; a repeat answers the first ones.
		if j := g.Journal(runID); e.Seq <= len(j) && j[e.Seq-1].Kind == e.Kind && j[e.Seq-1].Name == e.Name {
			e.Output = j[e.Seq-1].Output
		} else {
			token := fmt.Sprintf("cb-%s-%d", runID, e.Seq)
			out, _ := json.Marshal(map[string]any{"url": g.srv.URL + "/v1/callbacks/" + token, "token": token,
				"expires_at": time.Now().Add(7 * 24 * time.Hour).UTC()})
			e.Output = (*protocol.AnyJSON)(&out)
		}
	}
	if e.Kind == protocol.EntryKindSleep && e.Until == nil && e.Output != nil {
		// A sleep waited out in the process: the gateway fixes its wake time.
		var out struct{ Duration string }
		_ = json.Unmarshal(*e.Output, &out)
		d, _ := time.ParseDuration(out.Duration)
		until := time.Now().Add(d).UTC()
		e.Until = &until
	}
	if code, msg := g.Append(runID, e); code != http.StatusOK {
		problem(w, code, "nondeterminism", msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	ack := protocol.CheckpointAck{Seq: e.Seq, Until: e.Until}
	if e.Kind == protocol.EntryKindCallback {
		ack.Output = e.Output
	}
	_ = json.NewEncoder(w).Encode(ack)
}

// Append journals e for run runID as the gateway would: in seq order, an identical
// repeat is harmless and another entry at a journaled seq is a conflict. It returns the
// HTTP status the checkpoint answers.
func (g *Gateway) Append(runID string, e protocol.JournalEntry) (int, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	j := g.journal[runID]
	switch {
	case e.Seq == len(j)+1:
		g.journal[runID] = append(j, e)
		return http.StatusOK, ""
	case e.Seq >= 1 && e.Seq <= len(j):
		if old := j[e.Seq-1]; old.Kind != e.Kind || old.Name != e.Name {
			return http.StatusConflict, fmt.Sprintf("seq %d holds %s %q, not %s %q", e.Seq, old.Kind, old.Name, e.Kind, e.Name)
		}
		return http.StatusOK, ""
	default:
		return http.StatusBadRequest, fmt.Sprintf("seq %d out of order after %d entries", e.Seq, len(j))
	}
}

// writeStream appends a StreamWrite's chunks as the gateway does: a chunk whose place
// the stream holds is skipped; new chunks for a closed stream are refused.
func (g *Gateway) writeStream(w http.ResponseWriter, r *http.Request) {
	runID := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/checkpoint/stream")
	if r.Header.Get("Authorization") != "Bearer "+token(runID) {
		problem(w, http.StatusUnauthorized, "", "bad invocation token")
		return
	}
	var sw protocol.StreamWrite
	if err := json.NewDecoder(r.Body).Decode(&sw); err != nil {
		problem(w, http.StatusBadRequest, "", err.Error())
		return
	}
	attempt, index := 0, 0
	if sw.Attempt != nil {
		attempt = *sw.Attempt
	}
	if sw.Index != nil {
		index = *sw.Index
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.streams[runID+"\n"+sw.Key]
	if st == nil {
		st = &stream{places: map[[3]int]bool{}}
		g.streams[runID+"\n"+sw.Key] = st
	}
	var fresh []json.RawMessage
	for i, c := range sw.Chunks {
		if p := [3]int{sw.Seq, attempt, index + i}; !st.places[p] {
			st.places[p] = true
			fresh = append(fresh, json.RawMessage(c))
		}
	}
	if len(fresh) > 0 && st.closed {
		problem(w, http.StatusConflict, "stream_closed", "stream "+sw.Key+" is closed")
		return
	}
	st.chunks = append(st.chunks, fresh...)
	st.closed = st.closed || (sw.Close != nil && *sw.Close)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(protocol.StreamAck{Key: sw.Key, Length: len(st.chunks), Closed: st.closed})
}

func problem(w http.ResponseWriter, code int, typ, detail string) {
	p := protocol.Problem{Status: code, Title: http.StatusText(code), Detail: detail}
	if typ != "" {
		p.Type = &typ
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(p)
}

func token(runID string) string { return "tok-" + runID }

// Request returns an invocation of function for run runID with input (JSON) and the
// run's journal so far.
func (g *Gateway) Request(runID, function, input string) *protocol.InvocationRequest {
	return &protocol.InvocationRequest{
		Protocol: protocol.InvocationRequestProtocolN1,
		Run: protocol.InvocationRun{
			ID: runID, Function: function, Revision: 1, Attempt: 1,
			Input: protocol.AnyJSON(input), CreatedAt: time.Now().UTC(),
		},
		Identity:   protocol.Identity{Subject: "user-1", Tenant: Tenant, Roles: []string{"admin"}},
		Journal:    g.Journal(runID),
		Checkpoint: protocol.Checkpoint{URL: g.srv.URL + "/v1/runs/" + runID + "/checkpoint", Token: token(runID)},
	}
}

// Response is a function's answer to one invocation.
type Response struct {
	Code   int
	Body   []byte
	Answer protocol.InvocationAnswer // when Code is 200
	Error  protocol.ErrorInfo        // when Code is not 200
}

// ReplayOnly returns req made a replay-only invocation (InvocationRequest replay_only).
func ReplayOnly(req *protocol.InvocationRequest) *protocol.InvocationRequest {
	req.ReplayOnly = new(true)
	return req
}

// Invoke POSTs req, signed with Key, to url and returns the answer, having journaled the
// answer's steps as the gateway does before it applies the answer.
func (g *Gateway) Invoke(url string, req *protocol.InvocationRequest) Response {
	g.tb.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		g.tb.Fatal(err)
	}
	r := g.Post(url, body, g.Sign(http.MethodPost, url, body))
	if r.Code == http.StatusOK && r.Answer.Steps != nil {
		for _, e := range *r.Answer.Steps {
			if code, msg := g.Append(req.Run.ID, e); code != http.StatusOK {
				g.tb.Errorf("run %s: journal the answer's step %d: %d %s", req.Run.ID, e.Seq, code, msg)
			}
		}
	}
	return r
}

// Sign returns the signature header of a request of method to rawURL with body, signed
// now with Key for Tenant, as the gateway signs it ("" when Key is nil).
func (g *Gateway) Sign(method, rawURL string, body []byte) string {
	if g.Key == nil {
		return ""
	}
	return signature.Sign(time.Now(), Tenant, Request(method, rawURL, body), *g.Key)
}

// Request returns the signature.Request of method to rawURL with body.
func Request(method, rawURL string, body []byte) signature.Request {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	return signature.Request{Method: method, Path: signature.PathOf(u), Body: body}
}

// Post sends body to url with the signature header sig (none when empty) and returns the
// answer.
func (g *Gateway) Post(url string, body []byte, sig string) Response {
	g.tb.Helper()
	return g.do(http.MethodPost, url, body, sig)
}

// Get GETs url, signed with Key, and returns the answer.
func (g *Gateway) Get(url string) Response {
	g.tb.Helper()
	return g.do(http.MethodGet, url, nil, g.Sign(http.MethodGet, url, nil))
}

func (g *Gateway) do(method, url string, body []byte, sig string) Response {
	g.tb.Helper()
	req, err := http.NewRequestWithContext(g.tb.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		g.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set(signature.Header, sig)
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		g.tb.Fatal(err)
	}
	defer resp.Body.Close()
	r := Response{Code: resp.StatusCode}
	if r.Body, err = io.ReadAll(resp.Body); err != nil {
		g.tb.Fatal(err)
	}
	target := any(&r.Error)
	if r.Code == http.StatusOK {
		target = &r.Answer
	}
	if err := json.Unmarshal(r.Body, target); err != nil {
		g.tb.Fatalf("answer %d %s: %v", r.Code, r.Body, err)
	}
	return r
}

// Run drives run runID of function at url to its end as the gateway would, without
// waiting: it journals sleeps as over at once, waits for events as OnWaitEvent says, for
// messages as OnReceive says and for callbacks as OnCallback says, retries failed steps
// at once with the next
// attempt, runs an invoked function (served next to function, at the same base URL) to
// its end as run runID.seq and journals its outcome, and retries invocations that answer
// HTTP 500 up to maxAttempts. It returns the last answer and how many invocations it
// made, a child's not counted.
func (g *Gateway) Run(url, runID, function, input string, maxAttempts int) (Response, int) {
	g.tb.Helper()
	attempts := map[string]int{}
	invocations, failures := 0, 0
	for {
		req := g.Request(runID, function, input)
		req.Run.Attempt = failures + 1
		if len(attempts) > 0 {
			req.StepAttempts = &attempts
		}
		r := g.Invoke(url, req)
		invocations++
		if invocations > 100 {
			g.tb.Fatalf("run %s: no end after %d invocations", runID, invocations)
		}
		switch {
		case r.Code != http.StatusOK:
			if failures++; failures >= maxAttempts {
				return r, invocations
			}
		case r.Answer.Status != protocol.AnswerStatusSuspended:
			return r, invocations
		default:
			if p := awaits.Check(r.Answer.Await, awaits.Checks{}); p != nil {
				g.tb.Fatalf("run %s: await %q: %v", runID, r.Answer.Await.Type, p)
			}
			awaits.Apply(r.Answer.Await, &runStore{g: g, url: url, runID: runID, maxAttempts: maxAttempts, attempts: attempts, aw: *r.Answer.Await})
		}
	}
}

// runStore applies an await of a run Run drives (awaits.Store).
type runStore struct {
	g           *Gateway
	url, runID  string
	maxAttempts int
	attempts    map[string]int
	aw          protocol.Await
}

// Continue: nothing to journal; Run calls again at once.
func (s *runStore) Continue(int) {}

// Retry: the next invocation runs the step's next attempt, at once.
func (s *runStore) Retry(r awaits.Retry) { s.attempts[strconv.Itoa(r.Seq)] = *s.aw.Attempt + 1 }

// Sleep: the sleep is over at once.
func (s *runStore) Sleep(sl awaits.Sleep) {
	until := time.Now().UTC()
	if sl.Until != nil {
		until = *sl.Until
	}
	s.append(sl.Entry(until))
}

// Start runs each child (served next to the function, at the same base URL) to its
// end as run runID.seq and journals its outcome.
func (s *runStore) Start(c awaits.Children) {
	for i, call := range c.Calls {
		input := "null"
		if call.Input != nil {
			input = string(*call.Input)
		}
		seq := c.Seq + i
		childURL := s.url[:strings.LastIndex(s.url, "/")+1] + call.Function
		child, _ := s.g.Run(childURL, fmt.Sprintf("%s.%d", s.runID, seq), call.Function, input, s.maxAttempts)
		e := protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindInvoke, Name: c.Name}
		switch {
		case child.Code != http.StatusOK:
			e.Error = &protocol.ErrorInfo{Type: child.Error.Type, Message: child.Error.Message}
		case child.Answer.Status == protocol.AnswerStatusCompleted:
			e.Output = child.Answer.Output
		default:
			e.Error = child.Answer.Error
		}
		s.append(e)
	}
}

// Wait journals what OnWaitEvent (an event, or the first of a wait_any), OnReceive
// (a message) or OnCallback (a callback) says ends the wait, or that it timed out.
func (s *runStore) Wait(w awaits.Wait) {
	g := s.g
	g.mu.Lock()
	hook := g.resolve
	switch {
	case w.Any || w.Of[0].Event != "":
		hook = g.deliver
	case w.Of[0].Topic != "":
		hook = g.receive
	}
	g.mu.Unlock()
	e := w.TimedOut()
	if hook != nil {
		out := hook(s.runID, s.aw)
		e.Output = (*protocol.AnyJSON)(&out)
	}
	s.append(e)
}

func (s *runStore) append(e protocol.JournalEntry) {
	if code, msg := s.g.Append(s.runID, e); code != http.StatusOK {
		s.g.tb.Fatalf("run %s: journal %s: %s", s.runID, e.Kind, msg)
	}
}

// validNonce reports whether nonce is 32 lowercase hex digits, as the gateway requires.
func validNonce(nonce string) bool {
	if len(nonce) != 32 {
		return false
	}
	for _, c := range nonce {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
