package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"sync"

	"github.com/stepgate/stepgate/protocol"
)

// Function plays a scenario's functions on the wire, as a function written without an
// SDK would: an http.Handler serving each function of the scenario at /<name> in the
// request/response mode. It answers the n-th invocation of a run of a function with the
// n-th Invocation of the function's script (checking its Request and posting its
// Checkpoints first), and every invocation past the script with DefaultAnswer. It
// verifies no signature and claims no run (a runner may wrap it to verify). What goes
// wrong (a request that does not match, a checkpoint not answered 200) is kept for
// Errors; the function answers anyway. It is safe for concurrent use.
type Function struct {
	s      *Scenario
	client *http.Client

	mu   sync.Mutex
	runs map[string]*run
	errs []error
}

// run is what the function saw of one run.
type run struct {
	function  string
	requests  []*protocol.InvocationRequest
	callbacks map[string]callback // the latest callback of each name
}

type callback struct{ URL, Token string }

// NewFunction returns the functions of s, posting checkpoints with client
// (http.DefaultClient when nil).
func NewFunction(s *Scenario, client *http.Client) *Function {
	if client == nil {
		client = http.DefaultClient
	}
	return &Function{s: s, client: client, runs: map[string]*run{}}
}

// Errors returns what went wrong so far, in order.
func (f *Function) Errors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// Invocations returns how many invocations of run runID the function got.
func (f *Function) Invocations(runID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.runs[runID]; r != nil {
		return len(r.requests)
	}
	return 0
}

// LastRequest returns the last invocation request of run runID, or nil.
func (f *Function) LastRequest(runID string) *protocol.InvocationRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.runs[runID]; r != nil && len(r.requests) > 0 {
		return r.requests[len(r.requests)-1]
	}
	return nil
}

// Callback returns the URL and the token of run runID's latest callback called name, as
// the acknowledgement of its checkpoint gave them.
func (f *Function) Callback(runID, name string) (url, token string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.runs[runID]; r != nil {
		cb, ok := r.callbacks[name]
		return cb.URL, cb.Token, ok
	}
	return "", "", false
}

func (f *Function) fail(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Errorf(format, args...))
}

// ServeHTTP answers one invocation.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := path.Base(r.URL.Path)
	script, ok := f.s.Functions[name]
	if !ok {
		f.fail("%s %s: the scenario has no function %q", r.Method, r.URL.Path, name)
		http.Error(w, "no such function", http.StatusNotFound)
		return
	}
	var req protocol.InvocationRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.fail("function %s: decode the invocation request: %v", name, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Mode != nil && *req.Mode != protocol.InvocationRequestMode("request") {
		f.fail("function %s: an invocation in mode %q; the scenario's functions speak the request/response mode", name, *req.Mode)
	}
	if req.Run.Function != name {
		f.fail("function %s: an invocation of run.function %q", name, req.Run.Function)
	}
	f.mu.Lock()
	rs := f.runs[req.Run.ID]
	if rs == nil {
		rs = &run{function: name, callbacks: map[string]callback{}}
		f.runs[req.Run.ID] = rs
	}
	rs.requests = append(rs.requests, &req)
	n := len(rs.requests)
	f.mu.Unlock()

	answer := DefaultAnswer(script, req.Journal)
	if n <= len(script) {
		inv := script[n-1]
		if inv.Request != nil {
			if err := MatchRequest(inv.Request, &req); err != nil {
				f.fail("function %s, invocation %d of run %s: %v", name, n, req.Run.ID, err)
			}
		}
		for _, e := range inv.Checkpoints {
			f.checkpoint(r, &req, rs, e)
		}
		answer = inv.Answer
	}
	body, err := json.Marshal(answer)
	if err != nil {
		f.fail("function %s: encode the answer: %v", name, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// checkpoint posts e to the request's checkpoint URL and keeps a callback's URL and
// token from the acknowledgement.
func (f *Function) checkpoint(r *http.Request, req *protocol.InvocationRequest, rs *run, e protocol.JournalEntry) {
	raw, _ := json.Marshal(e)
	hreq, err := http.NewRequestWithContext(r.Context(), http.MethodPost, req.Checkpoint.URL, bytes.NewReader(raw))
	if err != nil {
		f.fail("checkpoint of %s %q at seq %d: %v", e.Kind, e.Name, e.Seq, err)
		return
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
	resp, err := f.client.Do(hreq)
	if err != nil {
		f.fail("checkpoint of %s %q at seq %d: %v", e.Kind, e.Name, e.Seq, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		f.fail("checkpoint of %s %q at seq %d: HTTP %d %s", e.Kind, e.Name, e.Seq, resp.StatusCode, body)
		return
	}
	if e.Kind != protocol.EntryKindCallback {
		return
	}
	var ack protocol.CheckpointAck
	var out struct {
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &ack); err == nil && ack.Output != nil {
		_ = json.Unmarshal(*ack.Output, &out)
	}
	if out.Token == "" {
		f.fail("checkpoint of callback %q at seq %d: the acknowledgement %s has no output.token", e.Name, e.Seq, body)
		return
	}
	f.mu.Lock()
	rs.callbacks[e.Name] = callback{URL: out.URL, Token: out.Token}
	f.mu.Unlock()
}

// DefaultAnswer is the answer of a function past its script: completed, with as output
// the entry of journal (the invocation request's) at the seq of the script's last await,
// as {"seq", "kind", "name", "output", "error"} (output and error only when the entry has
// them), or null when the script has no await or the journal no entry there.
func DefaultAnswer(script []Invocation, journal []protocol.JournalEntry) protocol.InvocationAnswer {
	out := json.RawMessage("null")
	if aw := LastAwait(script); aw != nil {
		if e, ok := EntryAt(journal, aw.Seq); ok {
			out, _ = json.Marshal(protocol.JournalEntry{Seq: e.Seq, Kind: e.Kind, Name: e.Name, Output: e.Output, Error: e.Error})
		}
	}
	return protocol.InvocationAnswer{Status: protocol.AnswerStatusCompleted, Output: &out}
}

// LastAwait returns the await of the script's last suspended answer, or nil.
func LastAwait(script []Invocation) *protocol.Await {
	for i := len(script) - 1; i >= 0; i-- {
		if aw := script[i].Answer.Await; aw != nil {
			return aw
		}
	}
	return nil
}

// ErrNoRun is returned by Check when the started run's function was never invoked.
var ErrNoRun = errors.New("the started run's function was never invoked")

// Outcome is how a runner found the started run at the end of a scenario.
type Outcome struct {
	Status string              // completed, failed or suspended
	Output json.RawMessage     // a completed run's
	Error  *protocol.ErrorInfo // a failed run's
}

// Check reports every way the end of the scenario differs from its Expect, given the
// started run's id, its outcome o and the function f that played the scenario (whose
// own errors it reports too); nil when none.
func (s *Scenario) Check(runID string, o Outcome, f *Function) error {
	errs := f.Errors()
	x := s.Expect
	if o.Status != x.Status {
		what := ""
		if o.Error != nil {
			what = fmt.Sprintf(" (%s: %s)", o.Error.Type, o.Error.Message)
		}
		errs = append(errs, fmt.Errorf("status: want %s, got %s%s", x.Status, o.Status, what))
	}
	if n := f.Invocations(runID); x.Invocations != 0 && n != x.Invocations {
		errs = append(errs, fmt.Errorf("invocations of the started run: want %d, got %d", x.Invocations, n))
	}
	if len(x.Entries) > 0 {
		if req := f.LastRequest(runID); req == nil {
			errs = append(errs, ErrNoRun)
		} else if err := MatchEntries(x.Entries, req.Journal); err != nil {
			errs = append(errs, fmt.Errorf("the journal of the last invocation request (invocation %d): %w", f.Invocations(runID), err))
		}
	}
	if x.Output != nil {
		if err := Match(x.Output, o.Output); err != nil {
			errs = append(errs, fmt.Errorf("output: %w", err))
		}
	}
	if x.Error != nil {
		got := map[string]json.RawMessage{}
		if o.Error != nil {
			raw, _ := json.Marshal(o.Error)
			_ = json.Unmarshal(raw, &got)
		}
		if err := matchFields(x.Error, got, "error"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
