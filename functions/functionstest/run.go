package functionstest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
)

// Status is where a run stands.
type Status string

const (
	Running   Status = "running" // Being driven: Result returns it only from inside a drive (a stub's, say).
	Completed Status = "completed"
	Failed    Status = "failed"
	Suspended Status = "suspended" // Waiting for time to pass (Advance), a delivery, or a child.
)

// Result is a run's state once the harness has driven it as far as it goes.
type Result struct {
	Status      Status
	Output      json.RawMessage     // When Completed.
	Error       *protocol.ErrorInfo // When Failed.
	Await       *protocol.Await     // When Suspended: what the run waits for.
	WakeAt      time.Time           // When Suspended on a sleep or a wait with a timeout: its virtual wake time.
	Invocations int                 // Invocations made so far, a child's not counted.
}

// Decode decodes the run's output into v; it returns an error when the run did not
// complete.
func (r Result) Decode(v any) error {
	if r.Status != Completed {
		if r.Error != nil {
			return fmt.Errorf("functionstest: the run is %s: %s: %s", r.Status, r.Error.Type, r.Error.Message)
		}
		return fmt.Errorf("functionstest: the run is %s, not completed", r.Status)
	}
	return json.Unmarshal(r.Output, v)
}

// Run is one run of a function in a Harness.
type Run struct {
	h          *Harness
	id         string
	function   string
	input      json.RawMessage
	created    time.Time
	evsAtStart int // how many events the harness held when the run was created
	parent     *Run
	parentSeq  int

	attempts map[string]int // step attempts, as the gateway sends them
	failures int            // invocations that failed (HTTP 500) or crashed
	res      Result
	driving  bool

	wait    *protocol.Await // the await the run is suspended on, or nil
	waiting *awaits.Wait    // when wait is a wait for something outside the run
	sleep   *awaits.Sleep   // when wait is a sleep
	wake    time.Time       // when wait times out; zero for none (a child)
	kids    map[int]protocol.JournalEntry
	need    int // children of the wait still running

	mem     awaits.Memory // its mailbox, its callbacks' resolutions, the events it received
	began   int           // the journal's next seq when the last invocation began
	scanned map[int]bool  // seqs of the journal scanned for sends
	invoked []Invocation
}

// ID returns the run's id (a UUID).
func (r *Run) ID() string { return r.id }

// Result returns the run's state; the harness drives runs when they are started and
// resumed, so it only reads.
func (r *Run) Result() Result {
	res := r.res
	if res.Status == "" {
		res.Status = Running
	}
	return res
}

// Journal returns the run's journal entries, in seq order.
// Steps run in parallel (step.Go) may leave holes, as on the gateway.
func (r *Run) Journal() []protocol.JournalEntry { return r.h.entries(r.id) }

// Advance is the harness's Advance, returning this run's state after it.
func (r *Run) Advance(d time.Duration) Result {
	r.h.t.Helper()
	r.h.Advance(d)
	return r.Result()
}

// CrashAfter makes the run's process crash right after the entry at seq is journaled:
// the invocation runs nothing more and its answer is lost, and the run is invoked again
// with its journal (counted as a failed invocation, as the gateway counts a lost one).
// Arm it before the invocation that journals seq: before Start with StartCrashing, or
// while the run is suspended.
func (r *Run) CrashAfter(seq int) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.h.crashes[r.id] = seq
}

// StartCrashing is Start with run.CrashAfter(seq) armed for its first invocation.
func (h *Harness) StartCrashing(function string, input any, seq int) *Run {
	h.t.Helper()
	raw, err := json.Marshal(input)
	if err != nil {
		h.t.Fatalf("functionstest: encode the input of %s: %v", function, err)
	}
	r := h.newRun(function, raw, nil, 0)
	r.CrashAfter(seq)
	r.drive()
	return r
}

// drive invokes the run until it ends or suspends on something outside it.
func (r *Run) drive() {
	h := r.h
	h.t.Helper()
	if r.driving || r.wait != nil || r.res.Status == Completed || r.res.Status == Failed {
		return
	}
	r.driving = true
	defer func() { r.driving = false }()
	for {
		if r.res.Invocations >= MaxInvocations {
			h.t.Fatalf("functionstest: run %s of %s: no end after %d invocations", r.id, r.function, MaxInvocations)
		}
		r.began = 1
		if j := h.entries(r.id); len(j) > 0 {
			r.began = j[len(j)-1].Seq + 1
		}
		resp := r.invoke()
		r.res.Invocations++
		crashed := h.takeCrash(r.id)
		if !crashed && resp.Code == http.StatusOK && resp.Answer.Steps != nil {
			crashAt, armed := h.crashSeq(r.id)
			for _, e := range *resp.Answer.Steps {
				r.append(e)
				if armed && e.Seq == crashAt {
					// A lazy step journaled with the answer: the answer is lost after it.
					h.disarm(r.id)
					crashed = true
					break
				}
			}
		}
		r.routeSends()
		if crashed {
			if r.failures++; r.failures >= h.maxAttempts(r.function) {
				r.finish(protocol.JournalEntry{Error: &protocol.ErrorInfo{Type: "crashed",
					Message: "functionstest: the invocation's process crashed (CrashAfter) and no attempts are left"}})
				return
			}
			continue
		}
		switch {
		case resp.Code != http.StatusOK:
			if r.failures++; r.failures >= h.maxAttempts(r.function) {
				info := resp.Error
				r.finish(protocol.JournalEntry{Error: &info})
				return
			}
		case resp.Answer.Status == protocol.AnswerStatusCompleted:
			r.finish(protocol.JournalEntry{Output: resp.Answer.Output})
			return
		case resp.Answer.Status == protocol.AnswerStatusFailed:
			info := protocol.ErrorInfo{Type: "error", Message: "failed without an error"}
			if resp.Answer.Error != nil {
				info = *resp.Answer.Error
			}
			r.finish(protocol.JournalEntry{Error: &info})
			return
		case resp.Answer.Await == nil:
			h.t.Fatalf("functionstest: run %s: suspended with no await", r.id)
		default:
			if !r.suspend(*resp.Answer.Await) {
				return
			}
		}
	}
}

// invoke makes one invocation of the run with its journal so far.
func (r *Run) invoke() gatewayResponse {
	h := r.h
	req := h.gw.Request(r.id, r.function, string(r.input))
	req.Journal = h.entries(r.id)
	req.Run.Attempt = r.failures + 1
	req.Run.CreatedAt = r.created
	if r.parent != nil {
		req.Run.ParentID = &r.parent.id
	}
	if len(r.attempts) > 0 {
		a := maps.Clone(r.attempts)
		req.StepAttempts = &a
	}
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	url := h.url + "/" + r.function
	return h.gw.Post(url, body, h.gw.Sign(http.MethodPost, url, body))
}

// append journals e as the gateway does; a conflict fails the test.
func (r *Run) append(e protocol.JournalEntry) {
	r.h.t.Helper()
	r.h.mu.Lock()
	code, msg := r.h.appendEntry(r.id, e)
	r.h.mu.Unlock()
	if code != http.StatusOK {
		r.h.t.Fatalf("functionstest: run %s: journal %s %q at seq %d: %s", r.id, e.Kind, e.Name, e.Seq, msg)
	}
}

// finish ends the run with e's output or error and hands it to the parent waiting.
func (r *Run) finish(e protocol.JournalEntry) {
	if e.Error != nil {
		r.res.Status, r.res.Error = Failed, e.Error
	} else {
		r.res.Status, r.res.Output = Completed, json.RawMessage("null")
		if e.Output != nil {
			r.res.Output = json.RawMessage(*e.Output)
		} else {
			e.Output = (*protocol.AnyJSON)(&r.res.Output)
		}
	}
	r.res.Await, r.res.WakeAt = nil, time.Time{}
	if r.parent != nil {
		r.parent.childDone(r.parentSeq, e)
	}
	for _, w := range r.h.waiting() { // the runs awaiting its end (step.AwaitRun)
		if w.waiting == nil {
			continue
		}
		if e, ok := w.waiting.First(func(a awaits.Alternative) (json.RawMessage, bool) {
			return r.h.runEndOf(r), a.RunID == r.id
		}); ok {
			w.resume(e)
		}
	}
}

// runEnd returns what an await_run of the run id journals once it has ended, and
// whether it has: as the gateway, not_found for a run the harness does not have.
func (h *Harness) runEnd(id string) (json.RawMessage, bool) {
	r := h.byID[id]
	switch {
	case r == nil:
		return awaits.RunNotFound(id), true
	case r.res.Status == Completed || r.res.Status == Failed:
		return h.runEndOf(r), true
	}
	return nil, false
}

func (h *Harness) runEndOf(r *Run) json.RawMessage {
	return awaits.RunEnded(r.id, string(r.res.Status), r.res.Output, r.res.Error)
}

// suspend applies aw as the gateway would (protocol/awaits); it reports whether the run
// can be invoked again at once.
func (r *Run) suspend(aw protocol.Await) bool {
	if p := awaits.Check(&aw, awaits.Checks{}); p != nil {
		r.h.t.Fatalf("functionstest: run %s: %v", r.id, p)
	}
	s := &suspension{r: r, aw: aw}
	awaits.Apply(&aw, s)
	return s.again
}

// suspension is the awaits.Store of one answer's await.
type suspension struct {
	r     *Run
	aw    protocol.Await
	again bool // the run can be invoked again at once
}

// Continue: as on the gateway, a continue that journaled nothing since its invocation
// began fails the run (it would be called again at once, forever).
func (s *suspension) Continue(seq int) {
	if r := s.r; seq <= r.began {
		r.finish(protocol.JournalEntry{Error: &protocol.ErrorInfo{Type: "bad_answer", Message: fmt.Sprintf(
			"functionstest: continue at seq %d journals nothing since the invocation began (the journal's next seq was %d)", seq, r.began)}})
		return
	}
	s.again = true
}

// Retry: as the gateway, the harness counts the step's attempts itself, not from the
// answer, and journals the step's failure once they reach its max_attempts (the
// await's, else the function's); it retries at once, not after the backoff.
func (s *suspension) Retry(rt awaits.Retry) {
	r, key := s.r, strconv.Itoa(rt.Seq)
	attempt, most := max(r.attempts[key], 1), r.h.maxAttempts(r.function)
	if rt.Policy != nil && rt.Policy.MaxAttempts != nil {
		most = *rt.Policy.MaxAttempts
	}
	s.again = true
	if attempt < most {
		r.attempts[key] = attempt + 1
		return
	}
	info := rt.Error
	info.Type = cmp.Or(info.Type, "step_failed")
	info.Message = fmt.Sprintf("%s (attempt %d of %d; the gateway gives up)", info.Message, attempt, most)
	info.Retryable = new(false)
	r.append(protocol.JournalEntry{Seq: rt.Seq, Kind: protocol.EntryKindStep, Name: rt.Name, Attempt: &attempt, Error: &info})
}

func (s *suspension) Sleep(sl awaits.Sleep) {
	r, now := s.r, s.r.h.now
	until := now.Add(max(sl.For, 0))
	if sl.Until != nil {
		until = sl.Until.UTC()
	}
	if !until.After(now) {
		r.append(sl.Entry(until))
		s.again = true
		return
	}
	r.park(s.aw, until)
	r.sleep = &sl
}

func (s *suspension) Start(c awaits.Children) {
	r := s.r
	r.park(s.aw, time.Time{})
	r.need = len(c.Calls)
	for i, call := range c.Calls {
		r.startChild(c.Seq+i, c.Name, call)
	}
	s.again = r.wait == nil
}

func (s *suspension) Wait(w awaits.Wait) {
	r, now := s.r, s.r.h.now
	for _, a := range w.Of {
		if a.RunID == r.id { // as the gateway: it would wait until its timeout
			r.finish(protocol.JournalEntry{Error: &protocol.ErrorInfo{Type: "bad_answer", Message: fmt.Sprintf(
				"functionstest: await_run %q at seq %d awaits the run itself", w.Name, w.Seq)}})
			return
		}
	}
	if e, ok := w.First(r.pending); ok {
		r.append(e)
		s.again = true
		return
	}
	wake := now.Add(w.Timeout)
	if w.Timeout == 0 { // an await_callback without its own timeout: its callback's expiry
		wake = r.callbackExpiry(w.Of[0].CallbackSeq, now.Add(DefaultCallbackTimeout))
	}
	r.park(s.aw, wake)
	r.waiting = &w
}

func (r *Run) park(aw protocol.Await, wake time.Time) {
	r.wait, r.wake = &aw, wake
	r.res.Status, r.res.Await, r.res.WakeAt = Suspended, &aw, wake
}

// resume journals e, the end of the run's wait, and drives the run on.
func (r *Run) resume(e protocol.JournalEntry) {
	r.h.t.Helper()
	r.append(e)
	r.wait, r.waiting, r.sleep, r.wake = nil, nil, nil, time.Time{}
	r.res.Status, r.res.Await, r.res.WakeAt = Running, nil, time.Time{}
	r.drive()
}

// timeout ends the run's due wait: a sleep is over, a wait times out.
func (r *Run) timeout() {
	if r.sleep != nil {
		r.resume(r.sleep.Entry(r.wake))
		return
	}
	r.resume(r.waiting.TimedOut())
}

// Invocation is a child run the run started (step.Invoke, step.WaitAll of invokes).
type Invocation struct {
	Seq      int
	Function string
	Input    json.RawMessage
	Stubbed  bool
	Run      *Run                // The child run, when the app's function answered it.
	Output   json.RawMessage     // When it completed.
	Error    *protocol.ErrorInfo // When it failed.
}

// Invoked returns the child runs the run started, in start order, with their outcomes
// once known.
func (r *Run) Invoked() []Invocation { return append([]Invocation(nil), r.invoked...) }

func (r *Run) startChild(seq int, name string, c protocol.InvokeCall) {
	input := json.RawMessage("null")
	if c.Input != nil {
		input = json.RawMessage(*c.Input)
	}
	r.invoked = append(r.invoked, Invocation{Seq: seq, Function: c.Function, Input: input})
	if stub, ok := r.h.stubs[c.Function]; ok {
		r.invoked[len(r.invoked)-1].Stubbed = true
		out, err := stub(input)
		e := protocol.JournalEntry{}
		if err != nil {
			info := protocol.ErrorInfo{Type: "error", Message: err.Error()}
			if se, ok := errors.AsType[*step.Error](err); ok {
				info.Type = se.Type
			}
			e.Error = &info
		} else {
			raw, merr := json.Marshal(out)
			if merr != nil {
				r.h.t.Fatalf("functionstest: stub %s: encode output: %v", c.Function, merr)
			}
			e.Output = (*protocol.AnyJSON)(&raw)
		}
		r.childDone(seq, e)
		return
	}
	if _, ok := r.h.conf[c.Function]; !ok {
		r.childDone(seq, protocol.JournalEntry{Error: &protocol.ErrorInfo{Type: "not_found",
			Message: fmt.Sprintf("functionstest: no stub and no function %q in the app", c.Function)}})
		return
	}
	child := r.h.newRun(c.Function, input, r, seq)
	r.invoked[len(r.invoked)-1].Run = child
	child.drive()
}

// childDone records the outcome of the child at seq; once all children of the wait
// have ended, it journals them in seq order and drives the run on.
func (r *Run) childDone(seq int, e protocol.JournalEntry) {
	for i := range r.invoked {
		if r.invoked[i].Seq == seq && r.invoked[i].Output == nil && r.invoked[i].Error == nil {
			if e.Output != nil {
				r.invoked[i].Output = json.RawMessage(*e.Output)
			}
			r.invoked[i].Error = e.Error
		}
	}
	r.kids[seq] = e
	if len(r.kids) < r.need {
		return
	}
	aw := *r.wait
	for s := aw.Seq; s < aw.Seq+r.need; s++ {
		k := r.kids[s]
		k.Seq, k.Kind, k.Name = s, protocol.EntryKindInvoke, aw.Name
		if k.Error != nil { // as the gateway journals a child's error: not retryable
			info := *k.Error
			info.Retryable = new(false)
			k.Error = &info
		}
		r.append(k)
	}
	r.kids, r.need = map[int]protocol.JournalEntry{}, 0
	r.wait, r.wake = nil, time.Time{}
	r.res.Status, r.res.Await = Running, nil
	r.drive()
}

type gatewayResponse = gatewaytest.Response

// callbackExpiry returns the expiry of the run's callback at seq, or def.
func (r *Run) callbackExpiry(seq int, def time.Time) time.Time {
	r.h.mu.Lock()
	e, ok := r.h.entryAt(r.id, seq)
	r.h.mu.Unlock()
	if !ok || e.Output == nil {
		return def
	}
	var out struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	if json.Unmarshal(*e.Output, &out) != nil || out.ExpiresAt.IsZero() {
		return def
	}
	return out.ExpiresAt
}
