package awaits

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// What follows decides a wait in memory, as the gateway decides it in Postgres: the
// harnesses keep what was delivered (events, messages, callbacks' resolutions) and ask
// the wait what ends it.

// Event is an event as a wait sees it.
type Event struct {
	ID, Name string
	Data     json.RawMessage
	Identity any // its sender's, as journaled
	At       time.Time
}

// Output is what a wait_event that ev ends journals.
func (ev Event) Output() json.RawMessage {
	return mustJSON(map[string]any{"event": map[string]any{"id": ev.ID, "name": ev.Name, "data": ev.Data,
		"identity": ev.Identity, "created_at": ev.At}})
}

// Message is a message in a run's mailbox, as a receive sees it.
type Message struct {
	ID, Topic string
	Data      json.RawMessage
	Identity  any    // its sender's
	Source    string // the run that sent it (a send entry); "" for one sent through the API
	At        time.Time
}

// Output is what a receive that takes m journals; the gateway names no source run for a
// message sent through the API.
func (m Message) Output() json.RawMessage {
	msg := map[string]any{"id": m.ID, "topic": m.Topic, "data": m.Data, "identity": m.Identity, "sent_at": m.At}
	if m.Source != "" {
		msg["source_run_id"] = m.Source
	}
	return mustJSON(map[string]any{"message": msg})
}

// Resolution is what an await_callback journals for a callback resolved with data at
// at, by its token's holder; a rejection when e is not nil.
func Resolution(data json.RawMessage, e *protocol.ErrorInfo, at time.Time) json.RawMessage {
	if e != nil {
		return mustJSON(map[string]any{"error": e, "resolver": "token", "resolved_at": at})
	}
	return mustJSON(map[string]any{"data": data, "resolver": "token", "resolved_at": at})
}

// RunEnded is what an await_run journals for the run id that ended with status: its
// output when it completed, else its error.
func RunEnded(id string, status string, output json.RawMessage, e *protocol.ErrorInfo) json.RawMessage {
	end := map[string]any{"id": id, "status": status}
	if status == "completed" {
		end["output"] = output
	} else {
		end["error"] = e
	}
	return mustJSON(map[string]any{"run": end})
}

// RunNotFound is what an await_run journals for a run id of no run of the tenant.
func RunNotFound(id string) json.RawMessage {
	return mustJSON(map[string]any{"run": map[string]any{"id": id,
		"error": protocol.ErrorInfo{Type: "not_found", Message: "no run " + id + " in the tenant"}}})
}

func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("awaits: encode %T: %v", v, err))
	}
	return raw
}

// Memory is what one run holds in memory that its waits may take, as the gateway's
// tables hold it: its mailbox (the messages no receive took yet, oldest first), its
// callbacks' resolutions, and the events its waits received (which no look-back takes
// again). The zero Memory is empty.
type Memory struct {
	mailbox  []Message
	resolved map[int]json.RawMessage
	received map[string]bool
}

// Send puts m in the mailbox.
func (m *Memory) Send(msg Message) { m.mailbox = append(m.mailbox, msg) }

// Settle records out, the resolution of the callback at seq; false when it was settled
// already (the gateway's 409).
func (m *Memory) Settle(seq int, out json.RawMessage) bool {
	if _, done := m.resolved[seq]; done {
		return false
	}
	if m.resolved == nil {
		m.resolved = map[int]json.RawMessage{}
	}
	m.resolved[seq] = out
	return true
}

// Take notes that a wait of the run received ev and returns the output it journals.
func (m *Memory) Take(ev Event) json.RawMessage {
	if m.received == nil {
		m.received = map[string]bool{}
	}
	m.received[ev.ID] = true
	return ev.Output()
}

// Elsewhere is what a run's waits find outside the run, in memory.
type Elsewhere struct {
	// Events are the tenant's events, oldest first; those from Created on were stored
	// since the run was created.
	Events  []Event
	Created int
	// RunEnd returns what an await_run of the run id journals once it has ended
	// (RunEnded, or RunNotFound), and whether it has.
	RunEnd func(id string) (json.RawMessage, bool)
}

// Pending returns the output that ends the alternative a now, from what the run holds
// (m) and what is elsewhere, and whether there is one, taking the message it uses: the
// oldest message of a's topic, its callback's resolution, its run's end, or the earliest
// event a look-back finds that no wait of the run received.
func (m *Memory) Pending(a Alternative, o Elsewhere) (json.RawMessage, bool) {
	switch {
	case a.Topic != "":
		for i, msg := range m.mailbox {
			if msg.Topic == a.Topic {
				m.mailbox = append(m.mailbox[:i:i], m.mailbox[i+1:]...)
				return msg.Output(), true
			}
		}
	case a.CallbackSeq != 0:
		out, ok := m.resolved[a.CallbackSeq]
		return out, ok
	case a.RunID != "":
		if o.RunEnd != nil {
			return o.RunEnd(a.RunID)
		}
	case a.LooksBack():
		evs := o.Events
		if a.SinceStart {
			evs = evs[min(o.Created, len(evs)):]
		}
		for _, ev := range evs {
			if a.TakesEvent(ev) && (a.SinceStart || a.LooksBackTo(ev.At, time.Time{})) && !m.received[ev.ID] {
				return m.Take(ev), true
			}
		}
	}
	return nil, false
}

// TakesEvent reports whether the event ev ends the alternative a, ignoring its look-back:
// an event of a's name whose fields hold each of a's match paths' values (numbers
// compared by value; a path the event lacks, or that holds an object or an array,
// matches nothing).
func (a Alternative) TakesEvent(ev Event) bool {
	if a.Event == "" || ev.Name != a.Event {
		return false
	}
	if len(a.Match) == 0 {
		return true
	}
	raw, _ := json.Marshal(map[string]any{"id": ev.ID, "name": ev.Name, "data": ev.Data})
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return false
	}
	for path, want := range a.Match {
		v, found := doc, true
		for _, k := range strings.Split(path, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				found = false
				break
			}
			if v, ok = m[k]; !ok {
				found = false
				break
			}
		}
		switch v.(type) {
		case map[string]any, []any:
			found = false
		}
		var w any
		if !found || json.Unmarshal(want, &w) != nil || !bytes.Equal(canonical(v), canonical(w)) {
			return false
		}
	}
	return true
}

// LooksBackTo reports whether an event stored at at, before the wait, ends a (with
// TakesEvent): a look-back since a time takes one stored since then; since_start, one
// stored since the run was created (created).
func (a Alternative) LooksBackTo(at, created time.Time) bool {
	switch {
	case a.SinceStart:
		return !at.Before(created)
	case a.Since != nil:
		return !at.Before(*a.Since)
	}
	return false
}

func canonical(v any) []byte {
	raw, _ := json.Marshal(v)
	return raw
}

// First returns the entry that ends w with the first of its alternatives that pick
// finds satisfied (pick returns the alternative's output), the lowest index among those
// satisfied at once, and whether one was.
func (w Wait) First(pick func(Alternative) (json.RawMessage, bool)) (protocol.JournalEntry, bool) {
	for i, a := range w.Of {
		if out, ok := pick(a); ok {
			return w.End(i, out), true
		}
	}
	return protocol.JournalEntry{}, false
}

// End returns the entry that ends w with its alternative i and that alternative's
// output: as is for a single wait, or, for a wait_any, which one ended it
// ({"index", "kind", "output"}).
func (w Wait) End(i int, out json.RawMessage) protocol.JournalEntry {
	if w.Any {
		out, _ = json.Marshal(map[string]any{"index": i, "kind": w.Of[i].Kind(), "output": out})
	}
	return w.entry(out)
}

// TimedOut returns the entry that ends w at its timeout.
func (w Wait) TimedOut() protocol.JournalEntry {
	return w.entry(json.RawMessage(`{"timed_out":true}`))
}

func (w Wait) entry(out json.RawMessage) protocol.JournalEntry {
	return protocol.JournalEntry{Seq: w.Seq, Kind: w.Kind(), Name: w.Name, Output: (*protocol.AnyJSON)(&out)}
}

// Takes reports whether w waits for a message of topic (one of its alternatives is a
// receive of it).
func (w Wait) Takes(topic string) bool {
	for _, a := range w.Of {
		if a.Topic != "" && a.Topic == topic {
			return true
		}
	}
	return false
}
