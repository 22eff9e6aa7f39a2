// Package invocation holds the state of one invocation of a function: the request, the
// next step's seq and the checkpoint client. Package functions creates it and answers the
// gateway; package step reads it from the context to replay or journal each step.
//
// # Unwinding
//
// When the invocation must end early (a sleep, a step retry, nondeterminism, a 409 from
// the checkpoint), step functions call [State.Halt], which panics with a private *[Stop].
// It is recovered in exactly one place, [State.Call], which wraps the user's function
// (package step, which turns a step function's panics into errors, passes it on as is).
// Halt records the first Stop in the State before panicking, so the answer does not
// depend on the panic reaching Call: user code that recovers panics generically, or
// returns an error instead, still ends with the recorded answer, and every later step call
// halts again at once without running anything. Halt also cancels the context given to
// user code. Called from a goroutine other than the one running Call, Halt cannot unwind
// (a panic there would crash the process), so it records the Stop and returns [ErrStopped]
// instead.
package invocation

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// ErrStopped is returned by step functions called outside the function's own goroutine
// once the invocation has stopped; the answer is already decided.
var ErrStopped = errors.New("step: invocation stopped")

// Stop is the outcome of an invocation that ends early, and the private panic value that
// unwinds user code to [State.Call].
type Stop struct {
	// Answer is written with HTTP 200 when Error is nil.
	Answer *protocol.InvocationAnswer
	// Error is written with HTTP 500, so the gateway retries the invocation.
	Error *protocol.ErrorInfo
}

// Failed returns a Stop answering a non-retryable failure.
func Failed(typ, msg string) *Stop {
	return &Stop{Answer: &protocol.InvocationAnswer{
		Status: protocol.AnswerStatusFailed,
		Error:  &protocol.ErrorInfo{Type: typ, Message: msg, Retryable: new(false)},
	}}
}

// Suspended returns a Stop answering that the run waits on aw.
func Suspended(aw *protocol.Await) *Stop {
	return &Stop{Answer: &protocol.InvocationAnswer{Status: protocol.AnswerStatusSuspended, Await: aw}}
}

// Retry returns a Stop answering HTTP 500 with an error of type typ.
func Retry(typ, msg string) *Stop {
	return &Stop{Error: &protocol.ErrorInfo{Type: typ, Message: msg}}
}

// Identity is functions.Identity, defined here so that package step can name it too.
type Identity struct {
	Subject string         `json:"subject"`
	Tenant  string         `json:"tenant"`
	Roles   []string       `json:"roles"`
	Claims  map[string]any `json:"claims,omitempty"`
}

// State is one invocation. Its methods are safe for concurrent use, though steps must be
// called one after another for their seqs to be deterministic.
type State struct {
	Req *protocol.InvocationRequest // The invocation, as the gateway sent it; read only.

	// reqCtx is the request's context: checkpoints use it rather than a step's context,
	// so a deadline the user put on a step cannot cut a checkpoint short.
	reqCtx  context.Context
	cancel  context.CancelCauseFunc
	ch      channel                 // where its requests to the gateway go
	journal []protocol.JournalEntry // journal[i].Seq == i+1, when byseq is nil
	bySeq   map[int]*protocol.JournalEntry

	// replayOnly: the invocation only replays its journal (see replay.go).
	replayOnly bool

	mu      sync.Mutex
	seq     int
	attempt int // of the step running now; 0 between steps
	stop    *Stop
	places  map[place]int // chunks written per stream and place, see StreamPlace
	undos   []Undo        // registered compensations, oldest first

	// budget, when positive, is how long the invocation may run before it answers a
	// continue at a step boundary (see SetBudget); started is when it began, and fresh
	// counts the entries it has started that the journal did not hold.
	budget  time.Duration
	started time.Time
	fresh   int

	// sleepMax is the longest sleep the function waits out in its process (see
	// SleepInProcess); 0 turns that off.
	sleepMax time.Duration

	// pending is a finished step's entry not checkpointed yet (see Defer).
	pending *protocol.JournalEntry

	// lazy makes every step's entry wait for what follows it (see SetLazy and Defer).
	lazy bool

	// Parallel steps (see GoStart): running counts those whose function or checkpoint
	// is under way; holes are the seqs they took that are not journaled (yet), with the
	// retry that a failed one waits for (nil while it runs, or when it stopped). done
	// is signalled (under mu) whenever one ends.
	running int
	holes   map[int]*protocol.Await
	done    *sync.Cond

	// owned says the gateway confirmed that this invocation owns its run, claimed by
	// this process's nonce (CheckOwner); ownerMu serializes the question.
	owned   atomic.Bool
	ownerMu sync.Mutex
}

// MaxWindow is the largest window a checkpoint or an await declares (the gateway's
// journal.MaxWindow): how many seqs below it may be missing while steps run in parallel.
const MaxWindow = 64

type inStepKey struct{}

// stepPlace is where a parallel step's function runs: its seq and attempt.
type stepPlace struct{ seq, attempt int }

// InStep returns ctx marked as the context of the function of the parallel step at seq,
// on attempt.
func InStep(ctx context.Context, seq, attempt int) context.Context {
	return context.WithValue(ctx, inStepKey{}, stepPlace{seq, attempt})
}

// StepOf returns the seq and attempt of the parallel step whose function ctx belongs to,
// or zeros.
func StepOf(ctx context.Context) (seq, attempt int) {
	p, _ := ctx.Value(inStepKey{}).(stepPlace)
	return p.seq, p.attempt
}

// GoStart marks the step at seq as running in parallel: it is a hole in the journal
// until GoDone says it was journaled.
func (s *State) GoStart(seq int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holes == nil {
		s.holes = map[int]*protocol.Await{}
		s.done = sync.NewCond(&s.mu)
	}
	s.running++
	s.holes[seq] = nil
}

// GoDone marks the parallel step at seq as ended: journaled, or not, waiting for retry
// (nil when it stopped with the invocation).
func (s *State) GoDone(seq int, journaled bool, retry *protocol.Await) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if journaled {
		delete(s.holes, seq)
	} else {
		s.holes[seq] = retry
	}
	s.done.Broadcast()
}

// Drain waits until no parallel step runs. The answer waits for it, so that every step
// that finished is journaled before the gateway hears how the invocation ended.
func (s *State) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running > 0 {
		s.done.Wait()
	}
}

// lowestHole returns the lowest seq below seq that a parallel step took and did not
// journal, or 0. The caller holds mu.
func (s *State) lowestHole(seq int) int {
	low := 0
	for h := range s.holes {
		if h < seq && (low == 0 || h < low) {
			low = h
		}
	}
	return low
}

// Window returns the window an entry or an await at seq declares: the distance from the
// lowest hole below it, and at least 2 while a parallel step runs, since its checkpoint
// may be concurrent with this one (the gateway serializes those); 1 otherwise.
func (s *State) Window(seq int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := 1
	if low := s.lowestHole(seq); low > 0 {
		w = seq - low + 1
	}
	if s.running > 0 {
		w = max(w, 2)
	}
	return w
}

// Holes returns the seqs that parallel steps took without journaling them (failed, to
// be retried, or stopped), lowest first.
func (s *State) Holes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.holes))
	for h := range s.holes {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// Undo is a compensation registered by step.Compensate: Name, and what it runs.
type Undo struct {
	Name string
	Fn   func(context.Context) error
}

// PushUndo registers a compensation.
func (s *State) PushUndo(u Undo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.undos = append(s.undos, u)
}

// TakeUndos returns the registered compensations, newest first, and forgets them.
func (s *State) TakeUndos() []Undo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Undo, 0, len(s.undos))
	for i := len(s.undos) - 1; i >= 0; i-- {
		out = append(out, s.undos[i])
	}
	s.undos = nil
	return out
}

// SetBudget makes the invocation stop at the first step boundary once four fifths of d
// have passed since it began, answering a continue await, so that it ends before a
// platform's time limit d with a margin for the answer (see [State.Next]). A new step is
// always started if the invocation has started none yet, so every invocation makes
// progress.
func (s *State) SetBudget(d time.Duration) {
	s.mu.Lock()
	s.budget = d
	s.mu.Unlock()
}

// SetLazy makes the invocation's steps journal lazily by default (the function's
// LazyCheckpoints option): see Lazy.
func (s *State) SetLazy(lazy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lazy = lazy
}

// Lazy says whether the invocation's steps journal lazily by default.
func (s *State) Lazy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lazy
}

// SetSleepInProcess sets the longest sleep the invocation waits out in its process; 0
// makes every sleep suspend the run.
func (s *State) SetSleepInProcess(max time.Duration) {
	s.mu.Lock()
	s.sleepMax = max
	s.mu.Unlock()
}

// SleepInProcess says whether a sleep of d may be waited out in this process: it is
// no longer than the limit (SetSleepInProcess), and the invocation has time to spare
// after it: before the gateway's deadline for its answer (an older gateway that sends
// none gets no in-process sleeps), with a margin of a tenth of the invocation's time and
// at least 2s, and within the budget (SetBudget).
func (s *State) SleepInProcess(d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replayOnly || s.sleepMax <= 0 || d > s.sleepMax || s.Req.Deadline == nil || s.stop != nil {
		return false
	}
	left := time.Until(*s.Req.Deadline)
	margin := max(2*time.Second, s.Req.Deadline.Sub(s.started)/10)
	if d > left-margin {
		return false
	}
	return s.budget <= 0 || time.Since(s.started)+d < s.budget-s.budget/5
}

// WaitOut waits d in this process, for a sleep. It halts when the invocation stops or
// the gateway ends its request meanwhile, and returns ctx's error when ctx ends first.
func (s *State) WaitOut(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.reqCtx.Done():
		return s.Halt(Retry("sleep", fmt.Sprintf("the gateway ended the invocation during a sleep in its process: %v", context.Cause(s.reqCtx))))
	case <-ctx.Done():
		if stop := s.Stopped(); stop != nil {
			return s.Halt(nil)
		}
		return ctx.Err()
	}
}

// place is where a function writes to a stream: in the step at seq on attempt, or
// between steps (attempt 0, before the entry at seq).
type place struct {
	key          string
	seq, attempt int
}

type ctxKey struct{}

// New returns the state of an invocation of req. reqCtx bounds checkpoints; cancel
// cancels the context given to user code when the invocation stops.
func New(reqCtx context.Context, req *protocol.InvocationRequest, client *http.Client, cancel context.CancelCauseFunc) *State {
	s := &State{Req: req, reqCtx: reqCtx, cancel: cancel, journal: req.Journal, started: time.Now(),
		ch:         &httpChannel{client: client, url: req.Checkpoint.URL, token: req.Checkpoint.Token},
		replayOnly: req.ReplayOnly != nil && *req.ReplayOnly}
	for i := range req.Journal {
		if req.Journal[i].Seq != i+1 {
			s.bySeq = make(map[int]*protocol.JournalEntry, len(req.Journal))
			for j := range req.Journal {
				s.bySeq[req.Journal[j].Seq] = &req.Journal[j]
			}
			break
		}
	}
	return s
}

// UseDuplex sends the invocation's requests to the gateway as frames of d, its duplex
// exchange, rather than HTTP requests. Call it before the function runs.
func (s *State) UseDuplex(d *Duplex) { s.ch = d }

// With returns ctx carrying s.
func With(ctx context.Context, s *State) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// From returns the State carried by ctx, or nil outside an invocation.
func From(ctx context.Context) *State {
	s, _ := ctx.Value(ctxKey{}).(*State)
	return s
}

// Call runs f, the user's function, and recovers the panic that ends it, if any. It is the
// one place that recovers a *Stop. It returns the recorded Stop when the invocation
// stopped, however f ended; otherwise the value f panicked with and the stack, if any.
func (s *State) Call(f func()) (stop *Stop, panicked any, stack []byte) {
	defer func() {
		v := recover()
		if stop = s.stopped(); stop == nil && v != nil {
			panicked, stack = v, debug.Stack()
		}
	}()
	callMarker(f)
	return nil, nil, nil
}

// callMarker is the frame Halt looks for to tell whether it runs under Call.
//
//go:noinline
func callMarker(f func()) { f() }

var callMarkerName = runtime.FuncForPC(reflect.ValueOf(callMarker).Pointer()).Name()

// Halt ends the invocation with stop, or with the Stop recorded before it. It panics to
// unwind to [State.Call] when called under it, and returns ErrStopped otherwise.
func (s *State) Halt(stop *Stop) error {
	s.mu.Lock()
	if s.stop == nil {
		s.stop = stop
	}
	stop = s.stop
	s.mu.Unlock()
	s.cancel(ErrStopped)
	if underCall() {
		panic(stop)
	}
	return ErrStopped
}

// Stopped returns how the invocation stopped early, or nil.
func (s *State) Stopped() *Stop { return s.stopped() }

func (s *State) stopped() *Stop {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop
}

// underCall reports whether the calling goroutine runs [State.Call]. Only the halting
// path asks, at most once per invocation, so walking the stack is cheap enough.
func underCall() bool {
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(3, pcs)
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if f.Function == callMarkerName {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
}

// Err returns why the request's context is done (the gateway went away), or nil.
func (s *State) Err() error {
	if s.reqCtx.Err() == nil {
		return nil
	}
	return context.Cause(s.reqCtx)
}

// ErrNested is returned when a step is started inside another step's function.
var ErrNested = errors.New("step: a step cannot start inside another step's function")

// Next takes the next seq for a step of kind named name and returns the journal's entry
// for it, or nil when it is not journaled. It halts when the invocation has stopped or
// the journal holds another entry at that seq, and returns ErrNested inside a step.
func (s *State) Next(kind protocol.EntryKind, name string) (int, *protocol.JournalEntry, error) {
	seq, es, err := s.NextN(kind, name, 1)
	if err != nil {
		return 0, nil, err
	}
	return seq, es[0], nil
}

// NextN takes the next n seqs, from the returned one on, for n entries of kind named
// name (an invoke_all's children), as Next takes one, and returns the journal's entries
// for them (nil where not journaled). A continue (the budget) is answered only before
// the first.
func (s *State) NextN(kind protocol.EntryKind, name string, n int) (int, []*protocol.JournalEntry, error) {
	if err := s.Flush(); err != nil {
		return 0, nil, err
	}
	return s.nextN(kind, name, n)
}

// NextAwaitN is NextN for entries whose fresh path suspends the run at once, the
// gateway journaling them from the answer's await (a sleep, a wait, a receive, an
// invoke): the step Defer holds, if any, is not checkpointed first. It stays held, below
// the seqs taken here, and goes in the suspended answer's steps, journaled in the
// transaction that applies the await; or, when the function goes on (the entries were
// journaled, or a sleep is waited out in the process), the next checkpoint journals it
// first. A suspension after a step then costs no checkpoint of its own.
func (s *State) NextAwaitN(kind protocol.EntryKind, name string, n int) (int, []*protocol.JournalEntry, error) {
	return s.nextN(kind, name, n)
}

func (s *State) nextN(kind protocol.EntryKind, name string, n int) (int, []*protocol.JournalEntry, error) {
	s.mu.Lock()
	if s.stop != nil {
		s.mu.Unlock()
		return 0, nil, s.Halt(nil)
	}
	if s.attempt != 0 {
		s.mu.Unlock()
		return 0, nil, ErrNested
	}
	if stop := s.roomFor(s.seq + n); stop != nil {
		s.mu.Unlock()
		return 0, nil, s.Halt(stop)
	}
	first := s.seq + 1
	s.seq += n
	s.mu.Unlock()

	es := make([]*protocol.JournalEntry, n)
	for i := range es {
		seq := first + i
		e := s.entry(seq)
		if e != nil && (e.Kind != kind || e.Name != name) {
			msg := fmt.Sprintf("step %d: code asks for %s %q but the journal holds %s %q", seq, kind, name, e.Kind, e.Name)
			return 0, nil, s.Diverged(seq, protocol.ReplayStep{Seq: seq, Kind: string(e.Kind), Name: e.Name},
				protocol.ReplayStep{Seq: seq, Kind: string(kind), Name: name}, msg)
		}
		if e == nil && s.replayOnly {
			// Past the journal: say so before anything runs or is journaled.
			return 0, nil, s.haltNext(seq, string(kind), name)
		}
		es[i] = e
	}
	if es[0] == nil {
		s.mu.Lock()
		over := s.budget > 0 && s.fresh > 0 && time.Since(s.started) >= s.budget-s.budget/5
		s.fresh++
		s.mu.Unlock()
		if over {
			return 0, nil, s.Halt(Suspended(&protocol.Await{Type: protocol.AwaitTypeContinue, Seq: first, Name: "continue"}))
		}
	}
	return first, es, nil
}

// roomFor waits, holding mu, until seq is within MaxWindow of the lowest hole parallel
// steps left below it. A hole that no running step will fill stops the invocation: the
// retry its step waits for, or a retried invocation.
func (s *State) roomFor(seq int) *Stop {
	for {
		low := s.lowestHole(seq)
		if low == 0 || seq-low+1 <= MaxWindow {
			return nil
		}
		if s.running == 0 {
			if aw := s.holes[low]; aw != nil {
				return Suspended(aw)
			}
			return Retry("parallel", fmt.Sprintf("step %d: step %d, run in parallel, did not finish, and %d steps came after it (at most %d)", seq, low, seq-low, MaxWindow-1))
		}
		s.done.Wait()
	}
}

// Patch decides a patch named name where the code reaches it, looking at the journal's
// next seq. A patch marker of that name there: it takes the seq and returns it with the
// marker (a replay of the patched path). Nothing there: it takes the seq and returns it
// with a nil marker (the run reaches the patch first: the caller journals the marker).
// Another entry there, written by code from before the patch: it takes no seq and
// returns 0 (the old path). With consumeOnly (DeprecatePatch) it only ever takes a
// marker's seq: nothing there returns 0 too. It halts when the invocation has stopped
// and returns ErrNested inside a step; replay-only, it halts where the caller would
// journal a marker.
func (s *State) Patch(kind protocol.EntryKind, name string, consumeOnly bool) (int, *protocol.JournalEntry, error) {
	if err := s.Flush(); err != nil {
		return 0, nil, err
	}
	seq, marker, err := s.patch(kind, name, consumeOnly)
	if seq > 0 && marker == nil && err == nil && s.replayOnly {
		// The marker would be journaled: a new entry past the journal.
		return 0, nil, s.haltNext(seq, string(kind), name)
	}
	return seq, marker, err
}

func (s *State) patch(kind protocol.EntryKind, name string, consumeOnly bool) (int, *protocol.JournalEntry, error) {
	s.mu.Lock()
	if s.stop != nil {
		s.mu.Unlock()
		return 0, nil, s.Halt(nil)
	}
	defer s.mu.Unlock()
	if s.attempt != 0 {
		return 0, nil, ErrNested
	}
	e := s.entry(s.seq + 1)
	switch {
	case e != nil && e.Kind == kind && e.Name == name:
		s.seq++
		return s.seq, e, nil
	case e == nil && !consumeOnly:
		s.seq++
		return s.seq, nil, nil
	}
	return 0, nil, nil
}

func (s *State) entry(seq int) *protocol.JournalEntry {
	if s.bySeq != nil {
		return s.bySeq[seq]
	}
	if seq <= len(s.journal) {
		return &s.journal[seq-1]
	}
	return nil
}

// Attempt returns the attempt this invocation makes of the step at seq: from the
// request's step_attempts, else 1.
func (s *State) Attempt(seq int) int {
	if s.Req.StepAttempts != nil {
		if a, ok := (*s.Req.StepAttempts)[strconv.Itoa(seq)]; ok && a > 0 {
			return a
		}
	}
	return 1
}

// Enter marks the start of a step's function, making attempt its current attempt.
func (s *State) Enter(attempt int) {
	s.mu.Lock()
	s.attempt = attempt
	s.mu.Unlock()
}

// Leave marks the end of a step's function.
func (s *State) Leave() { s.Enter(0) }

// Current returns the attempt of the step whose function runs now, or 0 between steps.
func (s *State) Current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempt
}

// Checkpoint tries to journal e and waits for the gateway's answer. It returns nil once
// the entry is durable and halts otherwise: on a 409, with the conflict's answer; when
// the gateway stays unreachable or failing after a few tries, with HTTP 500.
func (s *State) Checkpoint(e *protocol.JournalEntry) error {
	_, err := s.CheckpointAck(e)
	return err
}

// Defer journals e, a step that finished, later than Checkpoint would, for a step that
// opted in to lazy checkpoints (functions.LazyCheckpoints, step.Lazy): the invocation's
// next entry, patch or stream write checkpoints it first (Flush), and when the function
// answers first, it goes in the answer's steps (TakePending), so such a step costs no
// checkpoint of its own when it is the function's last. Every step is still journaled
// before the next one starts. What changes is the window in which a lost invocation runs
// the step again: it ends when the function moves on, rather than before the step's
// result is handed back, so code after the step may have seen a result whose step then
// runs again. Defer checkpoints e at once, as Checkpoint, while parallel steps run or
// left holes (their windows are reckoned at checkpoint time), and when its output is over
// maxDeferredBytes (an answer carries it beside the run's output, within the gateway's
// bound on an answer).
func (s *State) Defer(e *protocol.JournalEntry) error {
	small := e.Output == nil || len(*e.Output) <= maxDeferredBytes
	s.mu.Lock()
	if small && s.running == 0 && len(s.holes) == 0 && s.pending == nil && s.stop == nil {
		s.pending = e
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.Checkpoint(e)
}

// maxDeferredBytes is the largest step output Defer holds for the answer.
const maxDeferredBytes = 64 << 10

// Flush checkpoints the step Defer holds, if any, as Checkpoint does.
func (s *State) Flush() error {
	if e := s.TakePending(); e != nil {
		return s.Checkpoint(e)
	}
	return nil
}

// TakePending returns the step Defer holds, and forgets it, or nil: the caller journals
// it with the invocation's answer.
func (s *State) TakePending() *protocol.JournalEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.pending
	s.pending = nil
	return e
}

// CheckpointAck is Checkpoint, returning the gateway's acknowledgement once the entry is
// durable (for a send, the error journaled when its message could not be sent; for a
// callback, the output the gateway made). Replay-only, it halts with e as what comes next,
// sending nothing.
func (s *State) CheckpointAck(e *protocol.JournalEntry) (*protocol.CheckpointAck, error) {
	if s.replayOnly {
		return nil, s.haltNext(e.Seq, string(e.Kind), e.Name)
	}
	if p := s.TakePending(); p != nil {
		// A step held past an await's seq (NextAwaitN) is journaled before it.
		if _, err := s.CheckpointAck(p); err != nil {
			return nil, err
		}
	}
	if w := s.Window(e.Seq); w > 1 && e.Window == nil {
		e.Window = &w
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, s.Halt(Failed("output", fmt.Sprintf("step %d %q: encode journal entry: %v", e.Seq, e.Name, err)))
	}
	// Retried for as long as the invocation may run: until the gateway ends its request
	// (it answered, gave up on the function, or died), so a gateway restart or a
	// database outage of a few seconds costs a pause, not the step.
	var last string
	delay := checkpointBackoff
	for try := 0; ; try++ {
		if try > 0 {
			if err := s.pause(&delay, fmt.Sprintf("checkpoint step %d %q", e.Seq, e.Name), last); err != nil {
				return nil, err
			}
		}
		ack, stop, retry, after := s.checkpoint(e, body)
		if stop == nil {
			return ack, nil
		}
		if !retry {
			return nil, s.Halt(stop)
		}
		last = stop.Error.Message
		if after > delay {
			delay = min(after, maxCheckpointBackoff)
		}
	}
}

// A checkpoint that fails for a reason that may pass (the gateway unreachable or
// restarting, the database down: 5xx, 408, 429) is tried again after checkpointBackoff,
// doubling up to maxCheckpointBackoff, or after the Retry-After the gateway asks (up to
// the same bound).
const (
	checkpointBackoff    = 20 * time.Millisecond
	maxCheckpointBackoff = 2 * time.Second
)

// pause waits *delay before another try of a request to the gateway, then doubles it
// up to maxCheckpointBackoff. When the invocation's request ends first (the gateway
// answered it, gave up on the function, or died), it halts the invocation with a
// retryable failure naming where and the last try's failure, and returns that.
func (s *State) pause(delay *time.Duration, where, last string) error {
	t := time.NewTimer(*delay)
	defer t.Stop()
	select {
	case <-s.reqCtx.Done():
		return s.Halt(Retry("checkpoint", fmt.Sprintf("%s: %v (last: %s)", where, context.Cause(s.reqCtx), last)))
	case <-t.C:
	}
	*delay = min(2**delay, maxCheckpointBackoff)
	return nil
}

// checkpoint makes one try. It returns the acknowledgement and a nil Stop on success;
// retry says whether another try may succeed, and after how long the gateway asked for
// it (Retry-After), if it did.
func (s *State) checkpoint(e *protocol.JournalEntry, body []byte) (ack *protocol.CheckpointAck, stop *Stop, retry bool, after time.Duration) {
	code, raw, after, err := s.ch.send(s.reqCtx, opCheckpoint, body)
	if err != nil {
		return nil, Retry("checkpoint", fmt.Sprintf("checkpoint step %d %q: %v", e.Seq, e.Name, err)), s.canRetry(err), 0
	}
	if code >= 200 && code < 300 {
		ack = &protocol.CheckpointAck{Seq: e.Seq}
		_ = json.Unmarshal(raw, ack) // an older gateway's empty body is an acknowledgement too
		return ack, nil, false, 0
	}

	var p protocol.Problem
	_ = json.Unmarshal(raw, &p) // a body that is not a problem leaves p empty
	detail := cmp.Or(p.Detail, http.StatusText(code))
	where := fmt.Sprintf("checkpoint step %d %q", e.Seq, e.Name)
	switch {
	case code == http.StatusConflict:
		if p.Type != nil {
			// The type may be a bare word or a URI ending in one.
			switch path.Base(*p.Type) {
			case "nondeterminism", "conflict":
				return nil, Failed("nondeterminism", fmt.Sprintf("step %d %q: %s", e.Seq, e.Name, detail)), false, 0
			}
		}
		return nil, Failed("superseded", fmt.Sprintf("%s: %s", where, detail)), false, 0
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return nil, Retry("checkpoint", fmt.Sprintf("%s: %d %s", where, code, detail)), true, after
	case code == http.StatusUnauthorized:
		// The invocation token expired or is unknown: a new invocation brings a new one.
		return nil, Retry("checkpoint", fmt.Sprintf("%s: %d %s", where, code, detail)), false, 0
	default:
		// The gateway refuses this entry (too large, invalid): another try makes the same.
		return nil, Failed("checkpoint", fmt.Sprintf("%s: %d %s", where, code, detail)), false, 0
	}
}

// CheckOwner returns nil once the gateway has confirmed that this invocation owns its
// run, claimed for this process: the SDK calls it before the first step function of the
// invocation that the journal does not hold, so that a captured invocation request sent
// again to another process (whose replay memory is empty, within the signature's window)
// runs no step function, even while the invocation it copies runs. The first call makes a
// random 128-bit nonce and asks the gateway (POST checkpoint.url + "/current", with the
// invocation token and {"nonce"}), which answers 200 only to the first nonce asked for
// the invocation; it waits for the answer, tried again with the same nonce as Checkpoint
// is. Later calls return at once. A checkpoint the gateway took is no proof: a copy of
// the request checkpoints under the same token. It halts on a 409 (the run finished, was
// cancelled, another invocation owns it, or another process claimed this one) with the
// superseded failure, and on a 400, a 401 or a gateway that stays unreachable with a
// retryable one. Replay-only, it halts with a retryable failure, asking nothing (the
// code past the journal halts before it asks).
func (s *State) CheckOwner() error {
	if s.replayOnly {
		return s.replayGuard("check that the invocation owns its run")
	}
	if s.owned.Load() {
		return nil
	}
	s.ownerMu.Lock()
	defer s.ownerMu.Unlock()
	if s.owned.Load() {
		return nil
	}
	const where = "check that the invocation owns its run"
	// One nonce for every try of the question: a try whose answer was lost may have
	// claimed the invocation. (crypto/rand.Read never fails; the body always marshals.)
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	body, _ := json.Marshal(protocol.InvocationClaim{Nonce: hex.EncodeToString(nonce[:])})
	var last string
	delay := checkpointBackoff
	for try := 0; ; try++ {
		if try > 0 {
			if err := s.pause(&delay, where, last); err != nil {
				return err
			}
		}
		code, p, after, err := s.post(opCurrent, body)
		detail := cmp.Or(p.Detail, http.StatusText(code))
		switch {
		case err != nil:
			if !s.canRetry(err) {
				return s.Halt(Retry("checkpoint", fmt.Sprintf("%s: %v", where, err)))
			}
			last = err.Error()
		case code >= 200 && code < 300:
			s.owned.Store(true)
			return nil
		case code == http.StatusConflict:
			return s.Halt(Failed("superseded", fmt.Sprintf("%s: %s", where, detail)))
		case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
			last = fmt.Sprintf("%d %s", code, detail)
			if after > delay {
				delay = min(after, maxCheckpointBackoff)
			}
		default:
			// 401 (the token expired or is not this run's), or a gateway without the
			// check: no step runs on an answer that is not a yes.
			return s.Halt(Retry("checkpoint", fmt.Sprintf("%s: %d %s", where, code, detail)))
		}
	}
}

// StreamPlace reserves the places of n chunks written now to the stream key: the seq and
// attempt of the step whose function runs (or, between steps, the seq the next entry
// takes and 0), and the index of the first of them there. The same code makes the same
// places on every invocation, so the gateway skips chunks a replay writes again.
// A writer made inside a parallel step's function passes that step's seq and attempt
// as inSeq and inAttempt (0 otherwise).
func (s *State) StreamPlace(key string, n, inSeq, inAttempt int) (seq, attempt, index int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq, attempt = s.seq, s.attempt
	if inSeq > 0 {
		seq, attempt = inSeq, inAttempt
	} else if attempt == 0 {
		seq++
	}
	if s.places == nil {
		s.places = map[place]int{}
	}
	p := place{key, seq, attempt}
	index = s.places[p]
	s.places[p] += n
	return seq, attempt, index
}

// StreamError is a stream write the gateway refused without stopping the invocation:
// Type is limit_exceeded (a bound of the stream), stream_closed, or checkpoint (the
// write can never be taken, such as a bad key).
type StreamError struct {
	Type, Message string
}

func (e *StreamError) Error() string { return e.Message }

// WriteStream sends w to the gateway (checkpoint.url + "/stream") and waits for its
// answer, tried again as Checkpoint is. It returns nil once the chunks are durable, a
// *StreamError when the gateway refuses the write, and halts when the invocation no
// longer owns the run or the gateway stays unreachable. Replay-only, it sends nothing
// and returns nil.
func (s *State) WriteStream(w *protocol.StreamWrite) error {
	if s.replayOnly {
		return nil // not an entry: a replay-only invocation skips it, as it journals nothing
	}
	if err := s.Flush(); err != nil {
		return err
	}
	where := fmt.Sprintf("stream %q", w.Key)
	body, err := json.Marshal(w)
	if err != nil {
		return &StreamError{"checkpoint", fmt.Sprintf("%s: encode: %v", where, err)}
	}
	var last string
	delay := checkpointBackoff
	for try := 0; ; try++ {
		if try > 0 {
			if err := s.pause(&delay, where, last); err != nil {
				return err
			}
		}
		code, p, after, err := s.post(opStream, body)
		detail := cmp.Or(p.Detail, http.StatusText(code))
		switch {
		case err != nil:
			if !s.canRetry(err) {
				return s.Halt(Retry("checkpoint", fmt.Sprintf("%s: %v", where, err)))
			}
			last = err.Error()
			continue
		case code >= 200 && code < 300:
			return nil
		case code == http.StatusConflict:
			typ := ""
			if p.Type != nil {
				typ = path.Base(*p.Type)
			}
			if typ == "limit_exceeded" || typ == "stream_closed" {
				return &StreamError{typ, fmt.Sprintf("%s: %s", where, detail)}
			}
			return s.Halt(Failed("superseded", fmt.Sprintf("%s: %s", where, detail)))
		case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
			last = fmt.Sprintf("%d %s", code, detail)
			if after > delay {
				delay = min(after, maxCheckpointBackoff)
			}
		case code == http.StatusUnauthorized:
			return s.Halt(Retry("checkpoint", fmt.Sprintf("%s: %d %s", where, code, detail)))
		default:
			return &StreamError{"checkpoint", fmt.Sprintf("%s: %d %s", where, code, detail)}
		}
	}
}

// post sends body as op over the invocation's channel, and returns the status, the
// problem of a refusal, and the Retry-After asked.
func (s *State) post(op protocol.FrameOp, body []byte) (code int, p protocol.Problem, after time.Duration, err error) {
	code, raw, after, err := s.ch.send(s.reqCtx, op, body)
	if err != nil {
		return 0, p, 0, err
	}
	if code >= 300 {
		_ = json.Unmarshal(raw, &p) // a body that is not a problem leaves p empty
	}
	return code, p, after, nil
}

// canRetry says whether a request that failed with err, sending nothing, may be tried
// again: while the invocation's request goes on, and, in the duplex mode, its exchange.
func (s *State) canRetry(err error) bool {
	return s.reqCtx.Err() == nil && !errors.Is(err, ErrExchangeEnded)
}
