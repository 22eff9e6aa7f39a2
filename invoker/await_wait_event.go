package invoker

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strings"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/call"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// Bounds of a wait_event's match.
const (
	// MaxMatchPaths bounds the paths of a match.
	MaxMatchPaths = 8
	// MaxMatchBytes bounds a match, as JSON.
	MaxMatchBytes = 1024
	// DefaultWaitTimeout is a wait's timeout when the await names none.
	DefaultWaitTimeout = 24 * time.Hour
)

func init() { awaitKinds[protocol.AwaitTypeWaitEvent] = waitEventAwait }

// waitEventAwait: the run waits for an event of its tenant whose fields hold the
// match's values, or for the timeout; the event's transaction resumes it
// (journal.ResumeWaiters), and the claim after the timeout journals that it timed out.
// An event stored since the invocation started matches too, or with a look-back, since
// the run was created (since_start) or since a time (since, bounded by the event
// retention: journal.WaitEvent's LookBack).
var waitEventAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		if w.Event == nil {
			return c.bad("a wait_event needs an event")
		}
		if err := names.Check("wait_event: event", *w.Event); err != nil {
			return c.bad("%v", err)
		}
		if _, e := waitTimeout(c, w); e != nil {
			return e
		}
		if w.Since != nil && w.SinceStart != nil && *w.SinceStart {
			return c.bad("wait_event %q has since and since_start; a look-back takes one", w.Name)
		}
		if w.Match == nil {
			return nil
		}
		m := *w.Match
		if len(m) > MaxMatchPaths {
			return c.limit("the answer's wait_event match has %d paths, more than the limit of %d", len(m), MaxMatchPaths)
		}
		if raw, _ := json.Marshal(m); len(raw) > MaxMatchBytes {
			return c.limit("the answer's wait_event match is %d bytes of JSON, more than the limit of %d", len(raw), MaxMatchBytes)
		}
		for path, v := range m {
			if e := checkMatchPath(c, path); e != nil {
				return e
			}
			if !isScalar(v) {
				return c.bad("wait_event match %q is not a string, a number, a boolean or null: %s", path, call.Snippet(v))
			}
			if err := journal.CheckJSON(v); err != nil {
				return c.bad("wait_event match %q %v", path, err)
			}
		}
		return nil
	},
	outcome: func(inv *Invoker, _ *revision, claim *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		timeout, _ := waitTimeout(answerCheck{}, w) // checked by validate
		we := journal.WaitEvent{
			Seq: w.Seq, Name: w.Name, Event: *w.Event, Match: map[string]json.RawMessage{}, Timeout: timeout,
			Since: invocationStart(claim),
		}
		switch {
		case w.SinceStart != nil && *w.SinceStart:
			we.Since = claim.Run.CreatedAt
		case w.Since != nil:
			we.Since, we.LookBack = *w.Since, cmp.Or(inv.retention, DefaultRetention)
		}
		if w.Match != nil {
			for p, v := range *w.Match {
				we.Match[p] = json.RawMessage(v)
			}
		}
		return journal.WaitingForEvent(we, steps...)
	},
}

// waitTimeout returns a wait's timeout: the await's, from 1s to MaxSleep, or
// DefaultWaitTimeout.
func waitTimeout(c answerCheck, w *protocol.Await) (time.Duration, *journal.ErrorInfo) {
	if w.Timeout == nil {
		return DefaultWaitTimeout, nil
	}
	d, err := time.ParseDuration(*w.Timeout)
	if err != nil || d < time.Second || d > MaxSleep {
		return 0, c.bad("%s timeout %q is not a duration from 1s to %s, such as 1h", w.Type, *w.Timeout, MaxSleep)
	}
	return d, nil
}

// checkMatchPath checks a match's path: dotted names, rooted at the event's id, name
// or data.
func checkMatchPath(c answerCheck, path string) *journal.ErrorInfo {
	segs := strings.Split(path, ".")
	switch segs[0] {
	case "data":
	case "id", "name":
		if len(segs) == 1 {
			return nil
		}
		fallthrough
	default:
		return c.bad(`wait_event match path %q is not "id", "name", "data" or "data.<field>[.<field>...]"`, path)
	}
	for _, s := range segs[1:] {
		if err := names.Check("wait_event match path segment", s); err != nil {
			return c.bad("wait_event match path %q: %v", path, err)
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

// invocationStart is when the claimed invocation started, on the database clock: events
// stored since then match its wait.
func invocationStart(claim *journal.Claim) time.Time {
	switch {
	case !claim.Now.IsZero():
		return claim.Now
	case claim.Run.StartedAt != nil:
		return *claim.Run.StartedAt
	}
	return claim.Run.CreatedAt
}
