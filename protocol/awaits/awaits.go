// Package awaits is the one home of the rules of a suspended run's await: which kinds
// there are, what makes each well formed, what bounds it, the timeouts it defaults to,
// and what a first-of wait (wait_any) may take. The gateway (the invoker, storing an
// await in Postgres through the journal) and the in-memory harnesses (the Go SDK's
// functionstest and its fake gateway) read an await only through this package: [Check]
// says why one can never be applied, [Apply] hands a checked one to a [Store] as one of
// five transitions, and [Wait] decides, in memory, what ends a wait and the entry it
// journals. The protocol's conformance suite (protocol/conformance) holds the gateway
// and the harnesses to the same outcomes.
//
// Adding an await kind is a row in kinds (kinds.go): its check and the transition it
// makes; a wait for something outside the run is a new [Alternative] field, which every
// Store and the in-memory [Alternative.Takes] then handle.
package awaits

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// Bounds of an await.
const (
	// MaxSleep bounds a sleep, from now, and a wait's timeout.
	MaxSleep = 10 * 365 * 24 * time.Hour
	// DefaultWaitTimeout is a wait's timeout when the await names none (a wait_event,
	// a receive, a wait_any).
	DefaultWaitTimeout = 24 * time.Hour
	// DefaultCallbackTimeout is how long a callback stays open when its checkpoint
	// names no timeout, until an await sets its own.
	DefaultCallbackTimeout = 7 * 24 * time.Hour
	// MaxCallbackTimeout bounds a callback's timeout and an await_callback's.
	MaxCallbackTimeout = 365 * 24 * time.Hour
	// MaxAlternatives bounds a wait_any's alternatives.
	MaxAlternatives = 8
	// MaxInvokeAll bounds the child runs one invoke_all starts.
	MaxInvokeAll = 64
	// MaxMatchPaths bounds the paths of a wait_event's match.
	MaxMatchPaths = 8
	// MaxMatchBytes bounds a wait_event's match, as JSON.
	MaxMatchBytes = 1024
)

// Problem is why an await can never be applied: a malformed await, or one past a
// bound (Limit), whose message names the bound.
type Problem struct {
	Limit   bool
	Message string
}

func (p *Problem) Error() string { return p.Message }

func bad(format string, args ...any) *Problem {
	return &Problem{Message: fmt.Sprintf(format, args...)}
}

func limit(format string, args ...any) *Problem {
	return &Problem{Limit: true, Message: fmt.Sprintf(format, args...)}
}

// Checks are what [Check] asks of its caller beyond an await's shape: the store's
// bounds on journal entries and on what it can hold. A nil func accepts anything.
type Checks struct {
	// MaxEntries bounds a seq (an invoke_all's last child's); 0: no bound.
	MaxEntries int
	// JSON returns why a JSON value of the await (an input, a match value), named
	// what, can never be stored, or nil.
	JSON func(what string, raw []byte) *Problem
	// Error returns why a step's error, named what, can never be stored, or nil.
	Error func(what string, e *protocol.ErrorInfo) *Problem
	// Retry returns why a retry policy is malformed, or nil.
	Retry func(*protocol.RetryPolicy) error
}

func (c Checks) json(what string, raw *protocol.AnyJSON) *Problem {
	if raw == nil || c.JSON == nil {
		return nil
	}
	return c.JSON(what, *raw)
}

// Check returns why the await w can never be applied, or nil. w's seq and name are
// checked by the caller, with the answer's other entries.
func Check(w *protocol.Await, c Checks) *Problem {
	k, ok := kinds[w.Type]
	if !ok {
		return bad("await type %q is not supported (%s)", w.Type, typeList())
	}
	return k.check(c, w)
}

// Store is what an await does to a run, in a gateway or a harness: one of five
// transitions. Apply calls exactly one of its methods.
type Store interface {
	// Continue: nothing is journaled but the answer's steps; the run is called again
	// at once. seq is the await's.
	Continue(seq int)
	// Retry: a step failed with attempts left; the run waits the backoff and runs it
	// again.
	Retry(r Retry)
	// Sleep: the run sleeps until a time, or for a while from the store's clock.
	Sleep(s Sleep)
	// Start: the run starts child runs and waits for all of them.
	Start(c Children)
	// Wait: the run waits for the first of its alternatives, or for the timeout.
	Wait(w Wait)
}

// Apply hands the checked await w to s as its transition.
func Apply(w *protocol.Await, s Store) {
	kinds[w.Type].apply(w, s)
}

// Retry is a failed step's retry: its error and the retry policy the answer names
// (nil: the function's).
type Retry struct {
	Seq    int
	Name   string
	Error  protocol.ErrorInfo
	Policy *protocol.RetryPolicy
}

// Sleep is a sleep until Until, or, when Until is nil, for For from the store's clock.
type Sleep struct {
	Seq   int
	Name  string
	Until *time.Time
	For   time.Duration
}

// Entry returns the sleep's journal entry, once it ended at until.
func (s Sleep) Entry(until time.Time) protocol.JournalEntry {
	return protocol.JournalEntry{Seq: s.Seq, Kind: protocol.EntryKindSleep, Name: s.Name, Until: &until}
}

// Children are the child runs an invoke (one, All false) or an invoke_all (All true)
// starts, at Seq, Seq+1, ...
type Children struct {
	Seq   int
	Name  string
	Calls []protocol.InvokeCall
	All   bool
}

// Wait is a wait for something outside the run: the first of Of, or the timeout. A
// single wait (a wait_event, a receive, an await_callback) has one alternative and
// journals its output as is; a wait_any (Any) journals which alternative ended it.
type Wait struct {
	Seq  int
	Name string
	Any  bool
	// Timeout is how long the wait lasts from when it is stored; 0 for an
	// await_callback that names none: until its callback expires.
	Timeout time.Duration
	Of      []Alternative
}

// Kind is the kind of the wait's journal entry.
func (w Wait) Kind() protocol.EntryKind {
	if w.Any {
		return protocol.EntryKindWaitAny
	}
	return w.Of[0].Kind()
}

// Alternative is one thing a wait waits for: exactly one of an event (Event), a
// message (Topic), a callback's resolution (CallbackSeq) or another run's end (RunID).
type Alternative struct {
	// Event is the name of the event; Match the dotted paths into the event and the
	// JSON scalars they must hold; Since and SinceStart a look-back (events stored since
	// a time, or since the run was created, match too).
	Event      string
	Match      map[string]json.RawMessage
	Since      *time.Time
	SinceStart bool
	// Topic is the topic of the message to take.
	Topic string
	// CallbackSeq is the seq of the run's callback entry to wait for.
	CallbackSeq int
	// RunID is the id of the run of the tenant whose end to wait for, lower case.
	RunID string
}

// Kind is the kind of the alternative's own wait.
func (a Alternative) Kind() protocol.EntryKind {
	switch {
	case a.Event != "":
		return protocol.EntryKindWaitEvent
	case a.Topic != "":
		return protocol.EntryKindReceive
	case a.RunID != "":
		return protocol.EntryKindAwaitRun
	}
	return protocol.EntryKindAwaitCallback
}

// LooksBack reports whether events stored before the wait may end it.
func (a Alternative) LooksBack() bool { return a.Since != nil || a.SinceStart }

// JournalsNothing reports whether w journals no entry of its own (a continue): the run
// is called again at once, at its next step.
func JournalsNothing(w *protocol.Await) bool { return w.Type == protocol.AwaitTypeContinue }
