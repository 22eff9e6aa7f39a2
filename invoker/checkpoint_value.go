package invoker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// valueCheckpoint: the run publishes a value under a key, its entry's name
// (step.SetValue). The entry (output.KindValue) is journaled and the run's readers on
// every gateway are told (output.NotifyOutput), in one transaction; it is fenced and
// bounded like any entry.
func init() { checkpointKinds[protocol.EntryKindValue] = valueCheckpoint }

var valueCheckpoint = checkpointKind{
	check: func(_ Invocation, e *protocol.JournalEntry) error {
		if err := names.CheckFunction("value key", e.Name); err != nil {
			return badCheckpoint("%v", err)
		}
		if e.Error != nil {
			return badCheckpoint("a value entry has no error")
		}
		if e.Output == nil {
			return badCheckpoint("a value entry's output is the value")
		}
		return nil
	},
	journal: func(inv *Invoker, ctx context.Context, in Invocation, checkpoint protocol.JournalEntry) (CheckpointAck, error) {
		e := entryFromAPI(checkpoint)
		err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			if err := journal.AppendEntry(ctx, tx, in.RunID, in.Number, e, inv.limits.Bounds()); err != nil {
				return err
			}
			return output.NotifyOutput(ctx, tx, in.RunID)
		})
		return CheckpointAck{}, inv.failOnCheckpoint(ctx, in.RunID, in.Number, err)
	},
}
