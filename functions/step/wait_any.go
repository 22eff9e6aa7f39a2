package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Alternative is one of the things [WaitAny] waits for: [ForEvent], [ForCallback] or
// [ForMessage].
type Alternative struct {
	await protocol.Await
	err   error
}

// ForEvent is an event of the run's tenant called event whose fields hold match's
// values, as [WaitForEvent] takes it.
func ForEvent(event string, match Match) Alternative {
	m := map[string]protocol.AnyJSON{}
	for path, v := range match {
		raw, err := json.Marshal(v)
		if err != nil {
			return Alternative{err: fmt.Errorf("encode match %q: %w", path, err)}
		}
		m[path] = raw
	}
	return Alternative{await: protocol.Await{Type: protocol.AwaitTypeWaitEvent, Event: &event, Match: &m}}
}

// ForCallback is the resolution or rejection of cb, as [AwaitCallback] takes it.
func ForCallback(cb CallbackHandle) Alternative {
	return Alternative{await: protocol.Await{Type: protocol.AwaitTypeAwaitCallback, CallbackSeq: &cb.Seq}}
}

// ForMessage is the oldest message of topic in the run's mailbox, as [Receive] takes
// it; it is taken only if it is the alternative chosen.
func ForMessage(topic string) Alternative {
	return Alternative{await: protocol.Await{Type: protocol.AwaitTypeReceive, Topic: &topic}}
}

// Chosen is the outcome of [WaitAny]: Index is the alternative that came first, in the
// order WaitAny was given them, unless TimedOut. Read what came with [EventOf],
// [CallbackOf] or [MessageOf], as its kind says.
type Chosen struct {
	Index    int
	TimedOut bool
	st       *invocation.State
	entry    protocol.JournalEntry // the alternative's own entry, unwrapped
}

// WaitAny suspends the run until the first of alts comes (1 to 8: an event, a callback's
// resolution, a message), or timeout passes (from 1s to 10 years; 0 means 24h), and
// says which. Only the first resumes the run: the gateway ends the other waits in the
// same transaction, so a message is not taken and a later resolution of a callback is
// refused (409). An alternative that has come already when the run suspends (an event
// stored since this invocation started, a resolved callback, a message in the mailbox)
// is taken at once, the first in order. The outcome is journaled at this step's seq, so
// a replay returns it without waiting.
//
// name must be 1 to 255 bytes and each alternative valid; otherwise it returns a
// non-retryable error without taking a seq. It returns [ErrNoInvocation] when ctx is
// not an invocation's.
func WaitAny(ctx context.Context, name string, timeout time.Duration, alts ...Alternative) (Chosen, error) {
	var out Chosen
	if len(alts) == 0 || len(alts) > 8 {
		return out, NonRetryable(fmt.Errorf("step: wait_any %q: %d alternatives, not 1 to 8", name, len(alts)))
	}
	for i, a := range alts {
		if a.err != nil {
			return out, NonRetryable(fmt.Errorf("step: wait_any %q: alternative %d: %w", name, i, a.err))
		}
	}
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindWaitAny, name)
	if err != nil {
		return out, err
	}
	if e == nil {
		of := make([]protocol.Await, len(alts))
		for i, a := range alts {
			of[i] = a.await
			of[i].Seq, of[i].Name = seq, name
		}
		aw := &protocol.Await{Type: protocol.AwaitTypeWaitAny, Seq: seq, Name: name, Of: &of}
		return out, suspend(st, aw, timeout)
	}
	got, err := replay[struct {
		TimedOut bool               `json:"timed_out"`
		Index    int                `json:"index"`
		Kind     protocol.EntryKind `json:"kind"`
		Output   json.RawMessage    `json:"output"`
	}](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut {
		out.TimedOut = true
		return out, nil
	}
	out.Index, out.st = got.Index, st
	out.entry = protocol.JournalEntry{Seq: e.Seq, Name: e.Name, Kind: got.Kind, Output: (*protocol.AnyJSON)(&got.Output)}
	return out, nil
}

// kindOf checks that c's alternative is of kind k.
func (c Chosen) kindOf(k protocol.EntryKind) error {
	if c.TimedOut || c.st == nil {
		return NonRetryable(fmt.Errorf("step: wait_any %q timed out: no alternative came", c.entry.Name))
	}
	if c.entry.Kind != k {
		return NonRetryable(fmt.Errorf("step: wait_any %q: alternative %d is a %s, not a %s", c.entry.Name, c.Index, c.entry.Kind, k))
	}
	return nil
}

// EventOf returns the event that came, when c's alternative is a [ForEvent].
func EventOf[T any](c Chosen) (Event[T], error) {
	if err := c.kindOf(protocol.EntryKindWaitEvent); err != nil {
		return Event[T]{}, err
	}
	w, err := waitedFrom[T](c.st, &c.entry)
	return w.Event, err
}

// CallbackOf returns the callback's resolution, when c's alternative is a
// [ForCallback]; a rejection is its error, as for [AwaitCallback].
func CallbackOf[T any](c Chosen) (CallbackResult[T], error) {
	if err := c.kindOf(protocol.EntryKindAwaitCallback); err != nil {
		return CallbackResult[T]{}, err
	}
	return callbackFrom[T](c.st, &c.entry)
}

// MessageOf returns the message taken, when c's alternative is a [ForMessage].
func MessageOf[T any](c Chosen) (Message[T], error) {
	if err := c.kindOf(protocol.EntryKindReceive); err != nil {
		return Message[T]{}, err
	}
	r, err := receivedFrom[T](c.st, &c.entry)
	return r.Message, err
}
