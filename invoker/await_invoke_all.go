package invoker

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

func init() { awaitKinds[protocol.AwaitTypeInvokeAll] = invokeAllAwait }

// invokeAllAwait: the run starts several child runs at once (parallel children), as an
// invoke starts one, at the await's seq and the seqs after it, and waits until all of
// them have ended: each child's end journals its outcome at its seq, and the last one
// makes the run due (the trigger child_end_wakes_parent; docs/internals.md).
var invokeAllAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		if w.Calls == nil || len(*w.Calls) == 0 {
			return c.bad("an invoke_all needs calls")
		}
		calls := *w.Calls
		if len(calls) > journal.MaxInvokeAll {
			return c.limit("the invoke_all starts %d child runs, more than the limit of %d", len(calls), journal.MaxInvokeAll)
		}
		if last := w.Seq + len(calls) - 1; last > c.l.MaxEntries {
			return c.limit("the invoke_all's last child takes seq %d, past the journal's limit of %d entries (STEPGATE_MAX_JOURNAL_ENTRIES)", last, c.l.MaxEntries)
		}
		for i, call := range calls {
			if err := names.CheckFunction(fmt.Sprintf("invoke_all: calls[%d].function", i), call.Function); err != nil {
				return c.bad("%v", err)
			}
			if e := c.json(fmt.Sprintf("await.calls[%d].input", i), call.Input); e != nil {
				return e
			}
		}
		return nil
	},
	outcome: func(inv *Invoker, _ *revision, _ *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		in := journal.InvokeAll{Seq: w.Seq, Name: w.Name}
		for _, call := range *w.Calls {
			// Each child runs as the run's identity, as an invoke's does.
			c := journal.Invoke{ChildID: uuid.Must(uuid.NewV7()).String(), Function: call.Function, MaxTenantRuns: inv.limits.MaxTenantRuns,
				MaxTenantJournalBytes: inv.limits.MaxTenantJournalBytes}
			if call.Input != nil {
				c.Input = json.RawMessage(*call.Input)
			}
			c.Detached = call.Detached != nil && *call.Detached
			in.Calls = append(in.Calls, c)
		}
		return journal.InvokingChildren(in, steps...)
	},
}
