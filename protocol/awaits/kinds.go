package awaits

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// kind is one kind of await: how to check it, and the transition it makes.
type kind struct {
	// check returns why w can never be applied, or nil; w's seq and name are checked.
	check func(c Checks, w *protocol.Await) *Problem
	// apply hands a checked w to s.
	apply func(w *protocol.Await, s Store)
}

// kinds are the await kinds of the protocol, by type.
var kinds = map[protocol.AwaitType]kind{
	// continue: the function stopped early, at a step boundary, to stay under its
	// platform's time limit. The store refuses one that journals nothing since the
	// invocation began, which would be called again at once, forever.
	protocol.AwaitTypeContinue: {
		check: func(Checks, *protocol.Await) *Problem { return nil },
		apply: func(w *protocol.Await, s Store) { s.Continue(w.Seq) },
	},
	// retry: a step failed and has attempts left. The store brings the policy within
	// its limits and counts the attempts from its own records, never from the answer.
	protocol.AwaitTypeRetry: {
		check: func(c Checks, w *protocol.Await) *Problem {
			if w.Error == nil {
				return bad("a retry needs the step's error")
			}
			if c.Error != nil {
				if p := c.Error("await.error", w.Error); p != nil {
					return p
				}
			}
			if c.Retry != nil {
				if err := c.Retry(w.Retry); err != nil {
					return bad("retry: %v", err)
				}
			}
			return nil
		},
		apply: func(w *protocol.Await, s Store) {
			s.Retry(Retry{Seq: w.Seq, Name: w.Name, Error: *w.Error, Policy: w.Retry})
		},
	},
	// sleep: until a time (until) or for a while (duration, from the store's clock).
	protocol.AwaitTypeSleep: {
		check: func(_ Checks, w *protocol.Await) *Problem {
			switch {
			case w.Until == nil && w.Duration == nil:
				return bad("a sleep needs until or duration")
			case w.Duration != nil:
				if d, err := time.ParseDuration(*w.Duration); err != nil || d < 0 || d > MaxSleep {
					return bad("sleep duration %q is not a duration from 0s to %s, such as 1s", *w.Duration, MaxSleep)
				}
			case w.Until.Year() < 1970 || time.Until(*w.Until) > MaxSleep:
				return bad("sleep until %s is not between 1970 and %s from now", w.Until.Format(time.RFC3339), MaxSleep)
			}
			return nil
		},
		apply: func(w *protocol.Await, s Store) {
			sl := Sleep{Seq: w.Seq, Name: w.Name, Until: w.Until}
			if w.Until == nil {
				sl.For, _ = time.ParseDuration(*w.Duration) // checked
			}
			s.Sleep(sl)
		},
	},
	// invoke: a child run of a function of the run's tenant, started as the run's
	// identity; the child's end journals its outcome at the await's seq.
	protocol.AwaitTypeInvoke: {
		check: func(c Checks, w *protocol.Await) *Problem {
			if w.Function == nil {
				return bad("an invoke needs a function")
			}
			if err := names.CheckFunction("invoke: function", *w.Function); err != nil {
				return bad("%v", err)
			}
			return c.json("await.input", w.Input)
		},
		apply: func(w *protocol.Await, s Store) {
			s.Start(Children{Seq: w.Seq, Name: w.Name, Calls: []protocol.InvokeCall{{Function: *w.Function, Input: w.Input, Detached: w.Detached}}})
		},
	},
	// invoke_all: several child runs at once, at the await's seq and the seqs after it;
	// the run waits until all of them have ended.
	protocol.AwaitTypeInvokeAll: {
		check: func(c Checks, w *protocol.Await) *Problem {
			if w.Calls == nil || len(*w.Calls) == 0 {
				return bad("an invoke_all needs calls")
			}
			calls := *w.Calls
			if len(calls) > MaxInvokeAll {
				return limit("the invoke_all starts %d child runs, more than the limit of %d", len(calls), MaxInvokeAll)
			}
			if last := w.Seq + len(calls) - 1; c.MaxEntries > 0 && last > c.MaxEntries {
				return limit("the invoke_all's last child takes seq %d, past the journal's limit of %d entries (STEPGATE_MAX_JOURNAL_ENTRIES)", last, c.MaxEntries)
			}
			for i, call := range calls {
				if err := names.CheckFunction(fmt.Sprintf("invoke_all: calls[%d].function", i), call.Function); err != nil {
					return bad("%v", err)
				}
				if p := c.json(fmt.Sprintf("await.calls[%d].input", i), call.Input); p != nil {
					return p
				}
			}
			return nil
		},
		apply: func(w *protocol.Await, s Store) {
			s.Start(Children{Seq: w.Seq, Name: w.Name, Calls: *w.Calls, All: true})
		},
	},
	protocol.AwaitTypeWaitEvent:     single,
	protocol.AwaitTypeReceive:       single,
	protocol.AwaitTypeAwaitCallback: single,
	protocol.AwaitTypeAwaitRun:      single,
	// wait_any: the first of its alternatives, or the timeout. Each alternative is
	// checked as its own kind, and takes the wait_any's timeout.
	protocol.AwaitTypeWaitAny: {
		check: func(c Checks, w *protocol.Await) *Problem {
			if w.Of == nil || len(*w.Of) == 0 {
				return bad("a wait_any needs its alternatives in of")
			}
			if n := len(*w.Of); n > MaxAlternatives {
				return limit("the answer's wait_any has %d alternatives, more than the limit of %d", n, MaxAlternatives)
			}
			if _, p := waitTimeout(w); p != nil {
				return p
			}
			topics := map[string]bool{}
			for i := range *w.Of {
				o := &(*w.Of)[i]
				what := fmt.Sprintf("wait_any of[%d]", i)
				_, ok := alternatives[o.Type]
				switch {
				case !ok:
					return bad("%s is a %q; a wait_any takes the first of %s", what, o.Type, alternativeList())
				case o.Seq != w.Seq || o.Name != w.Name:
					return bad("%s has seq %d and name %q; an alternative has its wait_any's (%d, %q)", what, o.Seq, o.Name, w.Seq, w.Name)
				case o.Timeout != nil:
					return bad("%s has a timeout; the wait_any's timeout is the alternatives'", what)
				case o.Type == protocol.AwaitTypeReceive && o.Topic != nil && topics[*o.Topic]:
					return bad("%s receives topic %q, as an earlier alternative does", what, *o.Topic)
				case o.Type == protocol.AwaitTypeReceive && o.Topic != nil:
					topics[*o.Topic] = true
				}
				if p := alternatives[o.Type].check(c, o); p != nil {
					return p
				}
			}
			return nil
		},
		apply: func(w *protocol.Await, s Store) {
			timeout, _ := waitTimeout(w) // checked
			wait := Wait{Seq: w.Seq, Name: w.Name, Any: true, Timeout: timeout}
			for _, o := range *w.Of {
				wait.Of = append(wait.Of, alternatives[o.Type].of(&o))
			}
			s.Wait(wait)
		},
	},
}

// single is the kind of a wait with one alternative.
var single = kind{
	check: func(c Checks, w *protocol.Await) *Problem { return alternatives[w.Type].check(c, w) },
	apply: func(w *protocol.Await, s Store) {
		alt := alternatives[w.Type]
		timeout, _ := alt.timeout(w) // checked
		s.Wait(Wait{Seq: w.Seq, Name: w.Name, Timeout: timeout, Of: []Alternative{alt.of(w)}})
	},
}

// alternative is a kind of wait a wait_any may take the first of.
type alternative struct {
	check   func(c Checks, w *protocol.Await) *Problem
	timeout func(w *protocol.Await) (time.Duration, *Problem)
	of      func(w *protocol.Await) Alternative
}

// alternatives are the kinds of wait for something outside the run.
var alternatives = map[protocol.AwaitType]alternative{
	// wait_event: an event of the run's tenant whose fields hold the match's values.
	protocol.AwaitTypeWaitEvent: {
		check: func(c Checks, w *protocol.Await) *Problem {
			if w.Event == nil {
				return bad("a wait_event needs an event")
			}
			if err := names.Check("wait_event: event", *w.Event); err != nil {
				return bad("%v", err)
			}
			if _, p := waitTimeout(w); p != nil {
				return p
			}
			if w.Since != nil && w.SinceStart != nil && *w.SinceStart {
				return bad("wait_event %q has since and since_start; a look-back takes one", w.Name)
			}
			if w.Match == nil {
				return nil
			}
			m := *w.Match
			if len(m) > MaxMatchPaths {
				return limit("the answer's wait_event match has %d paths, more than the limit of %d", len(m), MaxMatchPaths)
			}
			if raw, _ := json.Marshal(m); len(raw) > MaxMatchBytes {
				return limit("the answer's wait_event match is %d bytes of JSON, more than the limit of %d", len(raw), MaxMatchBytes)
			}
			for _, path := range slices.Sorted(maps.Keys(m)) {
				v := m[path]
				if p := checkMatchPath(path); p != nil {
					return p
				}
				if !isScalar(v) {
					return bad("wait_event match %q is not a string, a number, a boolean or null: %s", path, snippet(v))
				}
				if c.JSON != nil {
					if p := c.JSON(fmt.Sprintf("wait_event match %q", path), v); p != nil {
						return p
					}
				}
			}
			return nil
		},
		timeout: waitTimeout,
		of: func(w *protocol.Await) Alternative {
			a := Alternative{Event: *w.Event, Since: w.Since, SinceStart: w.SinceStart != nil && *w.SinceStart, Match: map[string]json.RawMessage{}}
			if w.Match != nil {
				for p, v := range *w.Match {
					a.Match[p] = json.RawMessage(v)
				}
			}
			return a
		},
	},
	// receive: the oldest message of a topic in the run's mailbox.
	protocol.AwaitTypeReceive: {
		check: func(_ Checks, w *protocol.Await) *Problem {
			if w.Topic == nil {
				return bad("a receive needs a topic")
			}
			if err := names.Check("receive: topic", *w.Topic); err != nil {
				return bad("%v", err)
			}
			_, p := waitTimeout(w)
			return p
		},
		timeout: waitTimeout,
		of:      func(w *protocol.Await) Alternative { return Alternative{Topic: *w.Topic} },
	},
	// await_callback: the run's callback at callback_seq resolved or rejected. That
	// callback_seq is one of the run's callbacks is checked by the store.
	protocol.AwaitTypeAwaitCallback: {
		check: func(_ Checks, w *protocol.Await) *Problem {
			if w.CallbackSeq == nil {
				return bad("an await_callback needs a callback_seq, the seq of the run's callback entry")
			}
			if cs := *w.CallbackSeq; cs < 1 || cs >= w.Seq {
				return bad("await_callback callback_seq %d is not a seq before the await's (%d)", cs, w.Seq)
			}
			_, p := CallbackTimeout("await_callback", w.Timeout, 0)
			return p
		},
		timeout: func(w *protocol.Await) (time.Duration, *Problem) {
			return CallbackTimeout("await_callback", w.Timeout, 0)
		},
		of: func(w *protocol.Await) Alternative { return Alternative{CallbackSeq: *w.CallbackSeq} },
	},
	// await_run: another run of the tenant ended. That the run's identity may read it
	// is checked by the store.
	protocol.AwaitTypeAwaitRun: {
		check: func(_ Checks, w *protocol.Await) *Problem {
			if w.RunID == nil {
				return bad("an await_run needs a run_id, the id of the run to wait for")
			}
			if !isUUID(*w.RunID) {
				return bad("await_run run_id %q is not a run id (a UUID)", snippet([]byte(*w.RunID)))
			}
			_, p := waitTimeout(w)
			return p
		},
		timeout: waitTimeout,
		of:      func(w *protocol.Await) Alternative { return Alternative{RunID: strings.ToLower(*w.RunID)} },
	},
}

// isUUID reports whether s is a UUID in its canonical text form (8-4-4-4-12 hex digits).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'):
			return false
		}
	}
	return true
}

// waitTimeout returns a wait's timeout: the await's, from 1s to MaxSleep, or
// DefaultWaitTimeout.
func waitTimeout(w *protocol.Await) (time.Duration, *Problem) {
	if w.Timeout == nil {
		return DefaultWaitTimeout, nil
	}
	d, err := time.ParseDuration(*w.Timeout)
	if err != nil || d < time.Second || d > MaxSleep {
		return 0, bad("%s timeout %q is not a duration from 1s to %s, such as 1h", w.Type, *w.Timeout, MaxSleep)
	}
	return d, nil
}

// CallbackTimeout returns a callback's or an await_callback's (what) timeout: raw,
// from 1s to MaxCallbackTimeout, or def when raw is nil.
func CallbackTimeout(what string, raw *string, def time.Duration) (time.Duration, *Problem) {
	if raw == nil {
		return def, nil
	}
	d, err := time.ParseDuration(*raw)
	if err != nil || d < time.Second || d > MaxCallbackTimeout {
		return 0, bad("%s timeout %q is not a duration from 1s to %s, such as 24h", what, *raw, MaxCallbackTimeout)
	}
	return d, nil
}

// checkMatchPath checks a match's path: dotted names, rooted at the event's id, name
// or data.
func checkMatchPath(path string) *Problem {
	segs := strings.Split(path, ".")
	switch segs[0] {
	case "data":
	case "id", "name":
		if len(segs) == 1 {
			return nil
		}
		fallthrough
	default:
		return bad(`wait_event match path %q is not "id", "name", "data" or "data.<field>[.<field>...]"`, path)
	}
	for _, s := range segs[1:] {
		if err := names.Check("wait_event match path segment", s); err != nil {
			return bad("wait_event match path %q: %v", path, err)
		}
	}
	return nil
}

// isScalar reports whether v is a JSON string, number, boolean or null.
func isScalar(v []byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case '{', '[':
		return false
	}
	return json.Valid(v)
}

// snippet is raw, or its start, as text fit for a message.
func snippet(raw []byte) string {
	b := raw[:min(len(raw), 300)]
	s := strings.ReplaceAll(strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD"), "\x00", "\uFFFD")
	if len(raw) > 300 {
		s += "…"
	}
	return s
}

func typeList() string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(kinds)) {
		out = append(out, string(t))
	}
	return strings.Join(out, ", ")
}

func alternativeList() string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(alternatives)) {
		out = append(out, string(t))
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}
