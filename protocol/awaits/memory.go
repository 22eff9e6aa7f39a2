package awaits

import (
	"bytes"
	"encoding/json"
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
	At       time.Time
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
