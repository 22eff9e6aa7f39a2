package invoker

import (
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

func init() { awaitKinds[protocol.AwaitTypeReceive] = receiveAwait }

// receiveAwait: the run takes the oldest message of a topic from its mailbox, or waits
// for one, or for the timeout; a message already there is taken in the answer's
// transaction (journal.Receive), a later one in its send's (SendMessage,
// the send checkpoint, checkpoint_send.go), and the claim after the timeout journals that it timed out.
var receiveAwait = awaitKind{
	validate: func(c answerCheck, w *protocol.Await) *journal.ErrorInfo {
		if w.Topic == nil {
			return c.bad("a receive needs a topic")
		}
		if err := names.Check("receive: topic", *w.Topic); err != nil {
			return c.bad("%v", err)
		}
		_, e := waitTimeout(c, w)
		return e
	},
	outcome: func(_ *Invoker, _ *revision, _ *journal.Claim, w *protocol.Await, steps []journal.Entry) journal.Outcome {
		timeout, _ := waitTimeout(answerCheck{}, w) // checked by validate
		return journal.Receiving(journal.Receive{Seq: w.Seq, Name: w.Name, Topic: *w.Topic, Timeout: timeout}, steps...)
	},
}
