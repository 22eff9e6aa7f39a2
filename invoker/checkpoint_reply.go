package invoker

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// Requests: a client sends a run a request (SendMessage with journal.NewMessage.Request), a message on the topic
// journal.RequestTopic(name) that the run takes with a receive await of that topic; the
// run answers it with a checkpoint of kind reply (replyCheckpoint), which the client
// waiting on the request reads (request.RequestOf), woken by the run's output
// notification, or by the run's end when it ends without replying.

func init() { checkpointKinds[protocol.EntryKindReply] = replyCheckpoint }

// replyCheckpoint: the run replies to a request it received (step.Reply). The entry
// (journal.KindReply) is named after the request's id; its output is the reply, or its
// error an error reply. It is journaled, fenced and bounded like any entry, and the
// request's waiters on every gateway are told, in one transaction (journal.Reply). A
// reply to a request the run has not received, or has replied to already at another
// seq, is a *BadCheckpointError naming it, and the run goes on; an identical repeat is
// journaled once.
var replyCheckpoint = checkpointKind{
	journal: func(inv *Invoker, ctx context.Context, in Invocation, checkpoint protocol.JournalEntry) (CheckpointAck, error) {
		e := entryFromAPI(checkpoint)
		err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			return journal.Reply(ctx, tx, in.RunID, in.Number, e, inv.limits.Bounds())
		})
		if errors.Is(err, journal.ErrBadReply) {
			return CheckpointAck{}, badCheckpoint("%s", strings.TrimPrefix(err.Error(), journal.ErrBadReply.Error()+": "))
		}
		return CheckpointAck{}, inv.failOnCheckpoint(ctx, in.RunID, in.Number, err)
	},
}
