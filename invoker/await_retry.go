package invoker

import (
	"fmt"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

func init() { awaitKinds[protocol.AwaitTypeRetry] = retryAwait }

// retryAwait: a step failed and has attempts left; the run waits the backoff and runs it
// again. The retry policy the answer names is brought within the invoker's limits, and
// the step's attempts are counted from its recorded failures, never taken from the
// answer: a step past its attempts fails, whatever the function claims.
var retryAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		if w.Error == nil {
			return c.bad("a retry needs the step's error")
		}
		if e := c.error("await.error", w.Error); e != nil {
			return e
		}
		if _, err := ParseRetryPolicy(w.Retry, RetryPolicy{}); err != nil {
			return c.bad("retry: %v", err)
		}
		return nil
	},
	outcome: func(inv *Invoker, rev *revision, claim *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		policy, _ := ParseRetryPolicy(w.Retry, rev.config.Retries) // checked by validate
		policy = inv.limits.clampRetry(policy)
		attempt := 1
		if n, ok := claim.StepAttempts[w.Seq]; ok {
			attempt = n
		}
		stepErr := *errorFromAPI(w.Error)
		if attempt >= policy.MaxAttempts {
			// The step is out of attempts: journal its failure and call again at once, as
			// the SDK would have had it counted right.
			stepErr.Message = fmt.Sprintf("%s (attempt %d of %d; the gateway gives up)", stepErr.Message, attempt, policy.MaxAttempts)
			stepErr.Retryable = false
			if stepErr.Type == "" {
				stepErr.Type = "step_failed"
			}
			steps = append(steps, journal.Entry{Seq: w.Seq, Kind: journal.KindStep, Name: w.Name, Attempt: attempt, Error: &stepErr})
			return journal.Resuming(steps...)
		}
		return journal.RetryingStep(journal.StepRetry{
			Failure: journal.Failure{Seq: w.Seq, Attempt: attempt, Name: w.Name, Error: stepErr},
			After:   policy.Backoff(attempt),
		}, steps...)
	},
}
