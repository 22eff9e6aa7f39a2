package invoker

import (
	"encoding/json"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

func init() { awaitKinds[protocol.AwaitTypeInvoke] = invokeAwait }

// invokeAwait: the run starts a child run of a function of its tenant (current revision)
// as its own identity, and waits for it (a detached child is not cancelled with the
// run: journal.CancelDescendants); the child's end journals its outcome at the
// await's seq and makes the run due (journal.Finish, journal.CancelRun).
var invokeAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		if w.Function == nil {
			return c.bad("an invoke needs a function")
		}
		if err := names.CheckFunction("invoke: function", *w.Function); err != nil {
			return c.bad("%v", err)
		}
		return c.json("await.input", w.Input)
	},
	outcome: func(inv *Invoker, _ *revision, claim *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		in := journal.Invoke{
			// The child runs as the run's identity: its invoke_roles are checked against
			// that identity, as the gateway checks a caller's.
			Seq: w.Seq, Name: w.Name, ChildID: uuid.Must(uuid.NewV7()).String(), Function: *w.Function,
			MaxTenantRuns: inv.limits.MaxTenantRuns, MaxTenantJournalBytes: inv.limits.MaxTenantJournalBytes,
		}
		if w.Input != nil {
			in.Input = json.RawMessage(*w.Input)
		}
		in.Detached = w.Detached != nil && *w.Detached
		return journal.InvokingChild(in, steps...)
	},
}
