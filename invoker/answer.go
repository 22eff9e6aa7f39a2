package invoker

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stepgate/stepgate/invoker/internal/call"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
	"github.com/stepgate/stepgate/protocol/names"
)

// decodeAnswer reads a function's answer (an HTTP 200 body) and returns it, or why it
// fails the invocation: not JSON (malformed_answer, retried as a failed call is: a
// proxy's error page, a truncated body), or never applicable (see validateAnswer). It is
// the gateway's one decoder of what an untrusted function sends back.
func (l Limits) decodeAnswer(raw []byte) (*protocol.InvocationAnswer, *journal.ErrorInfo) {
	var a protocol.InvocationAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, &journal.ErrorInfo{Type: "malformed_answer", Message: fmt.Sprintf(
			"function's answer is not a JSON protocol answer (%v): %s", trimJSONErr(err), call.Snippet(raw))}
	}
	if e := l.validateAnswer(&a); e != nil {
		return nil, e
	}
	return &a, nil
}

// trimJSONErr says what encoding/json found wrong, without its Go type names.
func trimJSONErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s is %s", cmp.Or(te.Field, "the answer"), te.Value)
	}
	return err.Error()
}

// answerCheck holds the checks of an answer's parts against the limits l, each
// returning why the part can never be applied, or nil.
type answerCheck struct{ l Limits }

// badAnswer begins the message of a bad answer.
const badAnswer = "function's answer is not a valid protocol answer: "

// bad is a non-retryable error of type ErrorTypeBadAnswer.
func (answerCheck) bad(format string, args ...any) *journal.ErrorInfo {
	return &journal.ErrorInfo{Type: ErrorTypeBadAnswer, Message: badAnswer + fmt.Sprintf(format, args...)}
}

// limit is a non-retryable error of type ErrorTypeLimit, which names the limit.
func (answerCheck) limit(format string, args ...any) *journal.ErrorInfo {
	return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf(format, args...)}
}

// json checks a JSON value of the answer: within MaxOutputBytes, and storable.
func (c answerCheck) json(what string, raw *protocol.AnyJSON) *journal.ErrorInfo {
	if raw == nil {
		return nil
	}
	if len(*raw) > c.l.MaxOutputBytes {
		return c.limit("the answer's %s is %d bytes, more than the limit of %d (STEPGATE_MAX_OUTPUT_BYTES)", what, len(*raw), c.l.MaxOutputBytes)
	}
	if err := storable.CheckJSON(*raw); err != nil {
		return c.bad("%s %v", what, err)
	}
	return nil
}

// error checks an error of the answer: a type that is a name, a storable message within
// MaxOutputBytes.
func (c answerCheck) error(what string, e *protocol.ErrorInfo) *journal.ErrorInfo {
	if e == nil {
		return nil
	}
	if len(e.Type) > names.MaxBytes {
		return c.bad("%s.type is longer than %d bytes", what, names.MaxBytes)
	}
	if len(e.Message) > c.l.MaxOutputBytes {
		return c.limit("the answer's %s.message is %d bytes, more than the limit of %d (STEPGATE_MAX_OUTPUT_BYTES)", what, len(e.Message), c.l.MaxOutputBytes)
	}
	for field, v := range map[string]string{"type": e.Type, "message": e.Message} {
		if err := storable.CheckText(v); err != nil {
			return c.bad("%s.%s %v", what, field, err)
		}
	}
	return nil
}

// seq checks an entry's seq and name: from 1 to MaxEntries, and a name.
func (c answerCheck) seq(what string, seq int, name string) *journal.ErrorInfo {
	if seq < 1 {
		return c.bad("%s has seq %d; seqs count from 1", what, seq)
	}
	if seq > c.l.MaxEntries {
		return c.limit("the answer's %s has seq %d, past the journal's limit of %d entries (STEPGATE_MAX_JOURNAL_ENTRIES)", what, seq, c.l.MaxEntries)
	}
	if err := names.Check(what+" name", name); err != nil {
		return c.bad("%v", err)
	}
	return nil
}

// window checks a declared window (see journal.AppendEntry): from 1 to journal.MaxWindow.
func (c answerCheck) window(what string, w *int) *journal.ErrorInfo {
	if w != nil && (*w < 1 || *w > journal.MaxWindow) {
		return c.bad("%s has window %d, not from 1 to %d", what, *w, journal.MaxWindow)
	}
	return nil
}

// validateAnswer returns why a function's answer can never be applied, as a
// non-retryable error of type ErrorTypeBadAnswer, or ErrorTypeLimit when it passes one of
// l, or nil. It checks what the journal's rules and Postgres would refuse later, so that
// such an answer fails the run at once with a message that says why, instead of an
// error inside a transaction. An await is checked by the rules of protocol/awaits.
func (l Limits) validateAnswer(a *protocol.InvocationAnswer) *journal.ErrorInfo {
	c := answerCheck{l}
	if a.Steps != nil {
		for i, st := range *a.Steps {
			what := fmt.Sprintf("steps[%d]", i)
			if e := c.seq(what, st.Seq, st.Name); e != nil {
				return e
			}
			if st.Kind != protocol.EntryKindStep {
				return c.bad("%s (seq %d %q) is a %s; steps may only hold finished steps", what, st.Seq, st.Name, st.Kind)
			}
			if e := c.window(what, st.Window); e != nil {
				return e
			}
			if st.Attempt != nil && (*st.Attempt < 0 || *st.Attempt > l.MaxAttempts) {
				return c.bad("%s has attempt %d, not from 1 to %d", what, *st.Attempt, l.MaxAttempts)
			}
			if st.Output != nil && st.Error != nil {
				return c.bad("%s has an output and an error; a step has one", what)
			}
			if e := c.json(what+".output", st.Output); e != nil {
				return e
			}
			if e := c.error(what+".error", st.Error); e != nil {
				return e
			}
		}
	}
	switch a.Status {
	case protocol.AnswerStatusCompleted:
		return c.json("output", a.Output)
	case protocol.AnswerStatusFailed:
		if a.Error == nil || a.Error.Message == "" {
			return c.bad(`status "failed" needs an error with a message`)
		}
		return c.error("error", a.Error)
	case protocol.AnswerStatusSuspended:
		w := a.Await
		if w == nil {
			return c.bad(`status "suspended" needs an await`)
		}
		if e := c.seq("await", w.Seq, w.Name); e != nil {
			return e
		}
		if e := c.window("await", w.Window); e != nil {
			return e
		}
		return c.await(w)
	default:
		return c.bad("status %q is not one of completed, failed, suspended", a.Status)
	}
}

// outcomeOf reads a well-formed answer to the invocation of a claim; a malformed one was
// already refused by call. An await becomes its transition through protocol/awaits (transition).
func (inv *Invoker) outcomeOf(rev *revision, claim *journal.Claim, a *protocol.InvocationAnswer) journal.Outcome {
	var steps []journal.Entry
	if a.Steps != nil {
		for _, s := range *a.Steps {
			steps = append(steps, entryFromAPI(s))
		}
	}
	var o journal.Outcome
	switch a.Status {
	case protocol.AnswerStatusCompleted:
		var out json.RawMessage
		if a.Output != nil {
			out = json.RawMessage(*a.Output)
		}
		o = journal.Completed(out, steps...)
	case protocol.AnswerStatusFailed:
		e := errorFromAPI(a.Error)
		e.Retryable = false
		o = journal.Failed(*e, steps...)
	case protocol.AnswerStatusSuspended:
		t := &transition{inv: inv, rev: rev, claim: claim, steps: steps}
		awaits.Apply(a.Await, t)
		o = t.o
		if a.Await.Window != nil {
			o.AwaitWindow = *a.Await.Window
		}
	}
	o.Bounds = inv.limits.Bounds()
	o.Answered = true // a completed or failed run's journal has no holes
	return o
}
