package invoker

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// Requests: a client sends a run a request (SendRequest), a message on the topic
// journal.RequestTopic(name) that the run takes with a receive await of that topic; the
// run answers it with a checkpoint of kind reply (replyCheckpoint), which the client
// waiting on the request reads (journal.RequestOf), woken by the run's output
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

// SendRequest stores the request n in the mailbox of a run of db's tenant, as
// SendMessage stores a message, in one transaction that holds the run's row lock
// (journal.SendRequest): a run suspended on a receive of the request's topic takes it,
// and is enqueued in the transaction and invoked from this process once it commits.
// Errors are journal.SendRequest's.
func (inv *Invoker) SendRequest(ctx context.Context, db *journal.TenantDB, n journal.NewMessage) (*journal.Sent, error) {
	var sent *journal.Sent
	n.MaxTenantMailboxBytes = inv.limits.MaxTenantMailboxBytes
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		if sent, err = journal.SendRequest(ctx, tx, n); err != nil || !sent.Resumed {
			return err
		}
		return inv.enqueue(ctx, tx, n.RunID)
	})
	if err != nil {
		return sent, err
	}
	if sent.Resumed {
		inv.wake(n.RunID)
	}
	return sent, nil
}
