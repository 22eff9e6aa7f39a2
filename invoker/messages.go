package invoker

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
)

// Send stores a message in the mailbox of a run of db's tenant, in one
// transaction that holds the run's row lock (journal.SendMessage). When the run is
// suspended on a receive of the message's topic, the message is journaled there and the
// run's invocation is enqueued in the same transaction, then made from this process once
// it commits. Errors are journal.SendMessage's: journal.ErrNotFound,
// journal.ErrFinished (with the run's status in the returned Sent), an error wrapping
// journal.ErrMailboxFull, a *journal.QuotaError past the tenant's
// Limits.MaxTenantMailboxBytes.
func (ms *Messages) Send(ctx context.Context, db *journal.TenantDB, n journal.NewMessage) (*journal.Sent, error) {
	inv := ms.inv
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
		inv.wake(n.RunID, nil, 0)
	}
	return sent, nil
}

// ErrDebouncedStart: a start with a message (Messages.StartWith) of a function with a
// debounce (config.debounce), whose starts collapse into another start's run.
var ErrDebouncedStart = errors.New("a debounced function's starts collapse into another start's run: they cannot carry a message")

// StartedWithMessage is what Messages.StartWith did.
type StartedWithMessage struct {
	Run     *journal.Run  // The run of the idempotency key.
	Created bool          // This call created Run.
	Sent    *journal.Sent // The message stored, or the first with its id (Sent.Duplicate).
}

// StartWith is Temporal's signal-with-start: in one transaction of db's tenant,
// it creates the run n as StartRun does (its River jobs included) unless the tenant's
// run of n.IdempotencyKey, which is required, exists already, and stores m in that
// run's mailbox as SendMessage does (m.RunID is set to the run's). A refusal of either
// stores neither. The caller derives m.ID from the key (the gateway uses the key), so
// that a retry creates nothing and stores nothing again: SendMessage answers the first
// message with Sent.Duplicate, also once the run has finished.
//
// Errors are StartRun's (journal.ErrIdempotencyMismatch for the key's run with another
// input) and SendMessage's: journal.ErrFinished when the key's run has finished without
// message m.ID (with the run, and its status in Sent.Status: nothing is created; the key
// names that run for good), and ErrDebouncedStart for a function with a debounce.
func (ms *Messages) StartWith(ctx context.Context, db *journal.TenantDB, n journal.NewRun, m journal.NewMessage) (*StartedWithMessage, error) {
	inv := ms.inv
	if n.IdempotencyKey == "" {
		return nil, errors.New("invoker: a start with a message needs an idempotency key")
	}
	var out *StartedWithMessage
	n.MaxTenantRuns, n.MaxTenantJournalBytes = inv.limits.MaxTenantRuns, inv.limits.MaxTenantJournalBytes
	m.MaxTenantMailboxBytes = inv.limits.MaxTenantMailboxBytes
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		out = &StartedWithMessage{}
		run, created, err := journal.CreateRun(ctx, tx, n)
		if fe := (*journal.FlowError)(nil); errors.As(err, &fe) {
			// A debounce would hand this start another start's run (createFlowed).
			if flow, perr := ParseFlow(fe.Config); perr == nil && flow != nil && flow.Debounce != nil {
				return ErrDebouncedStart
			}
			run, created, err = inv.createFlowed(ctx, tx, n, fe)
		}
		if err != nil {
			return err
		}
		out.Run, out.Created = run, created
		if created {
			if err := inv.enqueueNew(ctx, tx, run); err != nil {
				return err
			}
		}
		m.RunID = run.ID
		out.Sent, err = journal.SendMessage(ctx, tx, m)
		if err != nil || !out.Sent.Resumed {
			return err
		}
		return inv.enqueue(ctx, tx, run.ID)
	})
	if err != nil {
		return out, err
	}
	inv.armHeld(out.Run)
	if out.Created {
		inv.armDeadline(out.Run)
	}
	if out.Sent.Resumed {
		inv.wake(out.Run.ID, nil, 0)
	}
	return out, nil
}
