package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Match says which event a wait takes, given to [WaitForEvent] with [Matching]: dotted
// paths into the event ("data.order_id", "data.customer.id", "id") and the value each
// must hold, a string, a number, a boolean or nil. Numbers match by value (1 and 1.0
// are equal); a path the event lacks, or that holds an object or an array, matches
// nothing. An empty Match takes any event of the name. At most 8 paths and 1024 bytes
// of JSON.
type Match map[string]any

// Event is an event a run received, with its data decoded into T.
type Event[T any] struct {
	ID     string
	Name   string
	Data   T
	Sender invocation.Identity // A functions.Identity: who sent it (the caller's token, or the run that sent it).
	SentAt time.Time           // When the gateway stored it (database clock).
}

// SinceStart makes [WaitForEvent] look back: it also takes the earliest matching event
// stored since the run was created (the one that started it included). Without a
// look-back, only events stored since the invocation that waits started match, so a run
// started and then sent its event at once needs SinceStart.
func SinceStart() Option {
	return Option{"SinceStart", func(p *options) {
		p.shape = append(p.shape, func(a *protocol.Await) { a.SinceStart, a.Since = new(true), nil })
	}}
}

// Since makes [WaitForEvent] look back to t: it also takes the earliest matching event
// stored at or after t. t must be neither after the gateway's clock when the wait is
// stored nor further back than its event retention (STEPGATE_RETENTION): otherwise the
// run fails with a bad_answer error. Prefer [SinceStart], or a time the run journaled,
// to a reading of this process's clock.
func Since(t time.Time) Option {
	return Option{"Since", func(p *options) {
		p.shape = append(p.shape, func(a *protocol.Await) { a.Since, a.SinceStart = &t, nil })
	}}
}

// WaitForEvent returns the wait called name for an event of the run's tenant called
// event: its [Future.Get] suspends the run until such an event arrives whose fields hold
// the values of the [Matching] option (any event of the name without it), and returns
// it; when the [Timeout] option's duration (1s to 10 years; defaults to 24h) passes
// first, it returns an error that is [ErrTimedOut]. Nothing of the run lives in memory
// while it waits. Making the future takes no seq: Get takes one (see [Future]).
//
// The gateway resumes the run with the first matching event, in the transaction that
// stores the event, and journals it at the wait's seq with its sender's identity, so
// a replay returns the same event without waiting. An event stored since this
// invocation started matches too (one sent while the function was on its way here is
// not lost), unless an earlier wait of the run already received it; with [SinceStart],
// one stored since the run was created, with [Since], one stored since a given time.
//
// WaitForEvent takes the options [Matching], [Timeout], [SinceStart] and [Since]. name must be 1 to 255 bytes
// and the match encode as JSON; otherwise, as for an option it does not take, Get
// returns a non-retryable error without taking a seq. A journaled event whose data does
// not decode into T halts the invocation (retried), as a step's output would.
func WaitForEvent[T any](ctx context.Context, name, event string, opts ...Option) *Future[Event[T]] {
	p, bad := optionsFor("WaitForEvent", opts, "Matching", "Timeout", "SinceStart", "Since")
	m := map[string]protocol.AnyJSON{}
	for path, v := range p.match {
		raw, err := json.Marshal(v)
		if err != nil && bad == nil {
			bad = NonRetryable(fmt.Errorf("step: wait %q: encode match %q: %w", name, path, err))
		}
		m[path] = raw
	}
	w := wait{
		kind: protocol.EntryKindWaitEvent, name: name, timeout: p.timeout,
		await: protocol.Await{Type: protocol.AwaitTypeWaitEvent, Event: &event, Match: &m},
	}
	for _, shape := range p.shape {
		shape(&w.await)
	}
	return newWait(ctx, w, eventFrom[T], bad)
}

// eventFrom reads a journaled wait_event entry (or a wait_any's, unwrapped).
func eventFrom[T any](st *invocation.State, e *protocol.JournalEntry) (Event[T], error) {
	var out Event[T]
	got, err := replay[waitedEntry](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut || got.Event == nil {
		return out, timedOut("wait", e.Seq, e.Name)
	}
	ev := got.Event
	out = Event[T]{ID: ev.ID, Name: ev.Name, Sender: ev.Identity, SentAt: ev.CreatedAt}
	return out, decodeJournaled(st, "wait", e.Seq, e.Name, ev.Data, &out.Data)
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
