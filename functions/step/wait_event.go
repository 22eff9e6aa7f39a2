package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Match says which event a wait takes: dotted paths into the event ("data.order_id",
// "data.customer.id", "id") and the value each must hold, a string, a number, a
// boolean or nil. Numbers match by value (1 and 1.0 are equal); a path the event lacks,
// or that holds an object or an array, matches nothing. An empty Match takes any event
// of the name. At most 8 paths and 1024 bytes of JSON.
type Match map[string]any

// Event is an event a run received, with its data decoded into T.
type Event[T any] struct {
	ID     string
	Name   string
	Data   T
	Sender invocation.Identity // A functions.Identity: who sent it (the caller's token, or the run that sent it).
	SentAt time.Time           // When the gateway stored it (database clock).
}

// Waited is the outcome of [WaitForEvent]: the event, or TimedOut when the timeout
// passed first.
type Waited[T any] struct {
	Event    Event[T]
	TimedOut bool
}

// WaitForEvent suspends the run until an event of its tenant called event arrives
// whose fields hold match's values, or timeout passes (from 1s to 10 years; 0 means
// 24h), and returns which: the event, or TimedOut. Nothing of the run lives in memory
// while it waits.
//
// The gateway resumes the run with the first matching event, in the transaction that
// stores the event, and journals it at this step's seq with its sender's identity, so
// a replay returns the same event without waiting. An event stored since this
// invocation started matches too (one sent while the function was on its way here is
// not lost), unless an earlier wait of the run already received it.
//
// name must be 1 to 255 bytes and match encode as JSON; otherwise it returns a
// non-retryable error without taking a seq. It returns [ErrNoInvocation] when ctx is not
// an invocation's. A journaled event whose data does not decode into T halts the
// invocation (retried), as a step's output would.
func WaitForEvent[T any](ctx context.Context, name, event string, match Match, timeout time.Duration) (Waited[T], error) {
	var out Waited[T]
	m := map[string]protocol.AnyJSON{}
	for path, v := range match {
		raw, err := json.Marshal(v)
		if err != nil {
			return out, NonRetryable(fmt.Errorf("step: wait %q: encode match %q: %w", name, path, err))
		}
		m[path] = raw
	}
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindWaitEvent, name)
	if err != nil {
		return out, err
	}
	if e != nil {
		return waitedFrom[T](st, e)
	}
	aw := &protocol.Await{Type: protocol.AwaitTypeWaitEvent, Seq: seq, Name: name, Event: &event, Match: &m}
	return out, suspend(st, aw, timeout)
}

// waitedFrom reads a journaled wait_event entry (or a wait_any's, unwrapped).
func waitedFrom[T any](st *invocation.State, e *protocol.JournalEntry) (Waited[T], error) {
	var out Waited[T]
	got, err := replay[waitedEntry](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut || got.Event == nil {
		out.TimedOut = true
		return out, nil
	}
	ev := got.Event
	out.Event = Event[T]{ID: ev.ID, Name: ev.Name, Sender: ev.Identity, SentAt: ev.CreatedAt}
	return out, decodeJournaled(st, "wait", e.Seq, e.Name, ev.Data, &out.Event.Data)
}

// waitedEntry is the output of a wait_event entry.
type waitedEntry struct {
	TimedOut bool `json:"timed_out"`
	Event    *struct {
		ID        string              `json:"id"`
		Name      string              `json:"name"`
		Data      json.RawMessage     `json:"data"`
		Identity  invocation.Identity `json:"identity"`
		CreatedAt time.Time           `json:"created_at"`
	} `json:"event"`
}
