package invoker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
)

// WriteStream appends w's chunks to a stream of runID for the invocation that owns the
// run, within the invoker's stream bounds, and tells the run's readers (see
// journal.WriteStream). Unlike an entry's, a stream write that passes a bound (a
// *journal.LimitError) or the tenant's stream quota (a *journal.QuotaError) or finds its stream closed (journal.ErrStreamClosed) is refused
// alone: nothing of it is stored, and the run goes on.
func (inv *Invoker) WriteStream(ctx context.Context, runID string, invocation int, w journal.StreamWrite) (*journal.Stream, error) {
	var st *journal.Stream
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		st, err = journal.WriteStream(ctx, tx, runID, invocation, w, inv.limits.StreamBounds())
		return err
	})
	return st, err
}

// Attach marks a run of db's tenant so that its end and its writes are announced to
// every gateway (Listener), and returns it as it is now; journal.ErrNotFound for
// another tenant's run. Subscribe before attaching: what happens after the attach is
// then announced.
func (inv *Invoker) Attach(ctx context.Context, db *journal.TenantDB, runID string) (*journal.Run, error) {
	return journal.Attach(ctx, db, db.Tenant(), runID)
}
