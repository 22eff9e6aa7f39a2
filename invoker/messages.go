package invoker

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// SendMessage stores a message in the mailbox of a run of db's tenant, in one
// transaction that holds the run's row lock (journal.SendMessage). When the run is
// suspended on a receive of the message's topic, the message is journaled there and the
// run's invocation is enqueued in the same transaction, then made from this process once
// it commits. Errors are journal.SendMessage's: journal.ErrNotFound,
// journal.ErrFinished (with the run's status in the returned Sent), an error wrapping
// journal.ErrMailboxFull, a *journal.QuotaError past the tenant's
// Limits.MaxTenantMailboxBytes.
func (inv *Invoker) SendMessage(ctx context.Context, db *journal.TenantDB, n journal.NewMessage) (*journal.Sent, error) {
	var sent *journal.Sent
	n.MaxTenantMailboxBytes = inv.limits.MaxTenantMailboxBytes
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		if sent, err = journal.SendMessage(ctx, tx, n); err != nil || !sent.Resumed {
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

// SentMessage is the message a run sends through a checkpoint (an entry of kind send).
type SentMessage struct {
	RunID string // The target, a run of the sender's tenant.
	ID    string
	Topic string
	Data  json.RawMessage
}

// CheckpointSend journals a function's checkpoint e, a send entry of the invocation that owns runID, and stores
// its message m in the target's mailbox with the run's tenant and identity, in one
// transaction (journal.SendFromRun); a target resumed by the message is enqueued in it
// and invoked from this process once it commits. A message that cannot be sent (no such
// run in the tenant, a finished run, a full mailbox) is journaled as e's error and
// returned as refused. Errors are as Checkpoint's.
func (inv *Invoker) CheckpointSend(ctx context.Context, runID string, invocation int, checkpoint protocol.JournalEntry, m SentMessage) (*protocol.ErrorInfo, error) {
	e := entryFromAPI(checkpoint)
	var sent *journal.Sent
	var refused *journal.ErrorInfo
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		sent, refused, err = journal.SendFromRun(ctx, tx, runID, invocation, e,
			journal.NewMessage{RunID: m.RunID, ID: m.ID, Topic: m.Topic, Data: m.Data, MaxTenantMailboxBytes: inv.limits.MaxTenantMailboxBytes}, inv.limits.Bounds())
		if err != nil || sent == nil || !sent.Resumed {
			return err
		}
		return inv.Enqueue(ctx, tx, m.RunID)
	})
	if err == nil && sent != nil && sent.Resumed {
		inv.Wake(m.RunID)
	}
	return errorToAPI(refused), inv.FailOnCheckpoint(ctx, runID, invocation, err)
}
