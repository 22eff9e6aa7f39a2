package invoker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
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
