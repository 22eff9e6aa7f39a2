package invoker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/output"
)

// WriteStream appends w's chunks to a stream of runID for the invocation that owns the
// run, within the invoker's stream bounds, and tells the run's readers (see
// output.WriteStream). Unlike an entry's, a stream write that passes a bound (a
// *journal.LimitError) or the tenant's stream quota (a *journal.QuotaError) or finds its stream closed (output.ErrStreamClosed) is refused
// alone: nothing of it is stored, and the run goes on.
func (c *Checkpoints) WriteStream(ctx context.Context, runID string, invocation int, w output.StreamWrite) (*output.Stream, error) {
	inv := c.inv
	var st *output.Stream
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		st, err = output.WriteStream(ctx, tx, runID, invocation, w, inv.limits.StreamBounds())
		return err
	})
	return st, err
}
