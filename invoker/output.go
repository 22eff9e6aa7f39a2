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
func (c *Checkpoints) WriteStream(ctx context.Context, runID string, invocation int, w journal.StreamWrite) (*journal.Stream, error) {
	inv := c.inv
	var st *journal.Stream
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		st, err = journal.WriteStream(ctx, tx, runID, invocation, w, inv.limits.StreamBounds())
		return err
	})
	return st, err
}
