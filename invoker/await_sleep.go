package invoker

import (
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// MaxSleep bounds a sleep, from now.
const MaxSleep = 10 * 365 * 24 * time.Hour

func init() { awaitKinds[protocol.AwaitTypeSleep] = sleepAwait }

// sleepAwait: the run sleeps until a time (until) or for a while (duration, from the
// database clock); the sleep is journaled with its wake time, and a journaled sleep is
// done.
var sleepAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		switch {
		case w.Until == nil && w.Duration == nil:
			return c.bad("a sleep needs until or duration")
		case w.Duration != nil:
			if d, err := time.ParseDuration(*w.Duration); err != nil || d < 0 || d > MaxSleep {
				return c.bad("sleep duration %q is not a duration from 0s to %s, such as 1s", *w.Duration, MaxSleep)
			}
		case w.Until.Year() < 1970 || time.Until(*w.Until) > MaxSleep:
			return c.bad("sleep until %s is not between 1970 and %s from now", w.Until.Format(time.RFC3339), MaxSleep)
		}
		return nil
	},
	outcome: func(_ *Invoker, _ *revision, _ *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		s := journal.Sleep{Seq: w.Seq, Name: w.Name, Until: w.Until}
		if w.Until == nil {
			s.For, _ = time.ParseDuration(*w.Duration) // checked by validate
		}
		return journal.Sleeping(s, steps...)
	},
}
