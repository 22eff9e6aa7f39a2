package invoker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// Requests: a client sends a run a request (SendRequest), a message on the topic
// journal.RequestTopic(name) that the run takes with a receive await of that topic; the
// run answers it with a checkpoint of kind reply (CheckpointReply), which the client
// waiting on the request reads (journal.RequestOf), woken by the run's output
// notification, or by the run's end when it ends without replying.

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
		return inv.Enqueue(ctx, tx, n.RunID)
	})
	if err != nil {
		return sent, err
	}
	if sent.Resumed {
		inv.Wake(n.RunID)
	}
	return sent, nil
}

// CheckpointReply journals a function's checkpoint e, a reply entry (journal.KindReply)
// of the invocation that owns runID, named after the id of a request the run received,
// and tells the request's waiters, in one transaction (journal.Reply). A reply to a
// request the run has not received, or has replied to already, is refused with an
// error wrapping journal.ErrBadReply, and the run goes on; other errors are as
// Checkpoint's: a conflict or a limit fails the run.
func (inv *Invoker) CheckpointReply(ctx context.Context, runID string, invocation int, checkpoint protocol.JournalEntry) error {
	e := entryFromAPI(checkpoint)
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		return journal.Reply(ctx, tx, runID, invocation, e, inv.limits.Bounds())
	})
	return inv.FailOnCheckpoint(ctx, runID, invocation, err)
}
