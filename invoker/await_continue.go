package invoker

import (
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// continueAwait: the function stopped early, at a step boundary, to stay under its
// platform's time limit (max_invocation_duration). Nothing is journaled but the answer's
// steps; the run is due at once and called again with its journal.
var continueAwait = awaitKind{
	validate: func(answerCheck, *protocol.Await) *journal.ErrorInfo { return nil },
	outcome: func(_ *Invoker, _ *revision, _ *journal.Claim, _ *protocol.Await, steps []journal.Entry) journal.Outcome {
		return journal.Resuming(steps...)
	},
}
