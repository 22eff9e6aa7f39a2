package invoker

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// sentMessage is the output of an entry of kind send: the message the run sends.
type sentMessage struct {
	RunID string          `json:"run_id"`
	Topic string          `json:"topic"`
	Data  json.RawMessage `json:"data"`
	ID    string          `json:"id"`
}

// sendCheckpoint: the run sends a message to a run of its tenant (step.Send). The
// entry's output is the message, {"run_id", "topic", "data", "id"}: the topic is the
// entry's name, and the id defaults to "<run id>:<seq>" (names.OwnRunSentID). The entry
// is journaled and the message stored in the target's mailbox with the run's tenant and
// identity in one transaction (journal.SendFromRun); a target resumed by the message is
// enqueued in it and invoked from this process once it commits. A message that cannot
// be sent (no such run in the tenant, a finished run, a full mailbox) is journaled as
// the entry's error and answered as refused.
func init() { checkpointKinds[protocol.EntryKindSend] = sendCheckpoint }

var sendCheckpoint = checkpointKind{
	check: func(in Invocation, e *protocol.JournalEntry) error {
		var out sentMessage
		if e.Output == nil || json.Unmarshal(*e.Output, &out) != nil {
			return badCheckpoint("a send entry's output is the message: {\"run_id\", \"topic\", \"data\", \"id\"}")
		}
		if e.Error != nil {
			return badCheckpoint("a send entry has no error; the gateway journals one when the message cannot be sent")
		}
		if _, err := uuid.Parse(out.RunID); err != nil {
			return badCheckpoint("a send entry's run_id %q is not a run id (a UUID)", out.RunID)
		}
		if out.Topic == "" {
			out.Topic = e.Name
		}
		if err := names.Check("message topic", out.Topic); err != nil {
			return badCheckpoint("%v", err)
		}
		if out.Topic != e.Name {
			return badCheckpoint("a send entry is named after its topic: %q, not %q", out.Topic, e.Name)
		}
		if err := names.OwnRunSentID("message id", &out.ID, in.RunID, e.Seq); err != nil {
			return badCheckpoint("%v", err)
		}
		if len(out.Data) == 0 {
			out.Data = json.RawMessage("null")
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return badCheckpoint("a send entry's data is not valid JSON: %v", err)
		}
		e.Output = (*protocol.AnyJSON)(&raw)
		return nil
	},
	journal: func(inv *Invoker, ctx context.Context, in Invocation, checkpoint protocol.JournalEntry) (CheckpointAck, error) {
		e := entryFromAPI(checkpoint)
		var m sentMessage
		_ = json.Unmarshal(e.Output, &m) // made by check
		var sent *journal.Sent
		var refused *journal.ErrorInfo
		err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			var err error
			sent, refused, err = journal.SendFromRun(ctx, tx, in.RunID, in.Number, e,
				journal.NewMessage{RunID: m.RunID, ID: m.ID, Topic: m.Topic, Data: m.Data, MaxTenantMailboxBytes: inv.limits.MaxTenantMailboxBytes}, inv.limits.Bounds())
			if err != nil || sent == nil || !sent.Resumed {
				return err
			}
			return inv.enqueue(ctx, tx, m.RunID)
		})
		if err == nil && sent != nil && sent.Resumed {
			inv.wake(m.RunID, nil, 0)
		}
		return CheckpointAck{Refused: errorToAPI(refused)}, inv.failOnCheckpoint(ctx, in.RunID, in.Number, err)
	},
}
