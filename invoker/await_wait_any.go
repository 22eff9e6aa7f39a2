package invoker

import (
	"fmt"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// anyAlternatives are the await kinds a wait_any may take the first of: the waits for
// something outside the run, each a run_wait row.
var anyAlternatives = map[protocol.AwaitType]bool{
	protocol.AwaitTypeWaitEvent:     true,
	protocol.AwaitTypeReceive:       true,
	protocol.AwaitTypeAwaitCallback: true,
}

// waitAnyAwait: the run waits for the first of its alternatives, or the timeout; each
// alternative is checked, and becomes its transition's await, as its own kind says.
var waitAnyAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		if w.Of == nil || len(*w.Of) == 0 {
			return c.bad("a wait_any needs its alternatives in of")
		}
		if n := len(*w.Of); n > journal.MaxAlternatives {
			return c.limit("the answer's wait_any has %d alternatives, more than the limit of %d", n, journal.MaxAlternatives)
		}
		if _, e := waitTimeout(c, w); e != nil {
			return e
		}
		topics := map[string]bool{}
		for i := range *w.Of {
			o := &(*w.Of)[i]
			what := fmt.Sprintf("wait_any of[%d]", i)
			switch {
			case !anyAlternatives[o.Type]:
				return c.bad("%s is a %q; a wait_any takes the first of wait_event, receive and await_callback", what, o.Type)
			case o.Seq != w.Seq || o.Name != w.Name:
				return c.bad("%s has seq %d and name %q; an alternative has its wait_any's (%d, %q)", what, o.Seq, o.Name, w.Seq, w.Name)
			case o.Timeout != nil:
				return c.bad("%s has a timeout; the wait_any's timeout is the alternatives'", what)
			case o.Type == protocol.AwaitTypeReceive && o.Topic != nil && topics[*o.Topic]:
				return c.bad("%s receives topic %q, as an earlier alternative does", what, *o.Topic)
			case o.Type == protocol.AwaitTypeReceive && o.Topic != nil:
				topics[*o.Topic] = true
			}
			if e := awaitKinds[o.Type].validate(c, o); e != nil {
				return e
			}
		}
		return nil
	},
	outcome: func(inv *Invoker, rev *revision, claim *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		timeout, _ := waitTimeout(answerCheck{}, w) // checked by validate
		any := journal.WaitAny{Seq: w.Seq, Name: w.Name, Timeout: timeout}
		for _, o := range *w.Of {
			o.Timeout = w.Timeout
			if o.Timeout == nil {
				o.Timeout = new(timeout.String())
			}
			any.Of = append(any.Of, awaitKinds[o.Type].outcome(inv, rev, claim, &o, nil).Await())
		}
		return journal.WaitingForAny(any, steps...)
	},
}

func init() { awaitKinds[protocol.AwaitTypeWaitAny] = waitAnyAwait }
