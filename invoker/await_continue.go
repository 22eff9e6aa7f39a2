package invoker

import (
	"fmt"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

func init() { awaitKinds[protocol.AwaitTypeContinue] = continueAwait }

// continueAwait: the function stopped early, at a step boundary, to stay under its
// platform's time limit (max_invocation_duration). Nothing is journaled but the answer's
// steps; the run is due at once and called again with its journal. A continue must
// follow at least one entry journaled by the invocation (its seq is past the journal's
// next seq at the claim): one that made no progress would be called again at once,
// forever, so it fails the run (bad_answer).
var continueAwait = awaitKind{
	validate: func(answerCheck, *protocol.Await) *journal.ErrorInfo { return nil },
	outcome: func(_ *Invoker, _ *revision, claim *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		next := 1
		if n := len(claim.Journal); n > 0 {
			next = claim.Journal[n-1].Seq + 1
		}
		if w.Seq <= next {
			return journal.Failed(journal.ErrorInfo{Type: ErrorTypeBadAnswer, Message: fmt.Sprintf(
				"function's answer is not a valid protocol answer: continue at seq %d journals nothing since the invocation began (the journal's next seq was %d); an invocation must finish a step before it continues", w.Seq, next)})
		}
		return journal.Resuming(steps...)
	},
}
