package invoker

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// sentEvent is the output of an entry of kind event: the event the run sends.
type sentEvent struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data"`
	ID   string          `json:"id"`
}

// eventCheckpoint: the run sends an event of its tenant, with its identity (step.SendEvent).
// The entry's output is the event, {"name", "data", "id"}: the name is the entry's, and
// the id defaults to "<run id>:<seq>" (names.OwnRunSentID). The entry is journaled and
// the event sent in one transaction: the entry is fenced like a step's, and a repeated
// checkpoint finds both the entry and the event (its id) already there, so it starts
// nothing twice. An event whose triggers would pass the tenant's quota of runs (a
// *journal.QuotaError) fails the run with it, as a limit does.
func init() { checkpointKinds[protocol.EntryKindEvent] = eventCheckpoint }

var eventCheckpoint = checkpointKind{
	check: func(in Invocation, e *protocol.JournalEntry) error {
		var out sentEvent
		if e.Output == nil || json.Unmarshal(*e.Output, &out) != nil {
			return badCheckpoint("an event entry's output is the event: {\"name\", \"data\", \"id\"}")
		}
		if e.Error != nil {
			return badCheckpoint("an event entry has no error")
		}
		if out.Name == "" {
			out.Name = e.Name
		}
		if out.Name != e.Name {
			return badCheckpoint("an event entry is named after its event: %q, not %q", out.Name, e.Name)
		}
		if err := names.OwnRunSentID("event id", &out.ID, in.RunID, e.Seq); err != nil {
			return badCheckpoint("%v", err)
		}
		if len(out.Data) == 0 {
			out.Data = json.RawMessage("null")
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return badCheckpoint("an event entry's data is not valid JSON: %v", err)
		}
		e.Output = (*protocol.AnyJSON)(&raw)
		return nil
	},
	journal: func(inv *Invoker, ctx context.Context, in Invocation, checkpoint protocol.JournalEntry) (CheckpointAck, error) {
		e := entryFromAPI(checkpoint)
		var ev sentEvent
		_ = json.Unmarshal(e.Output, &ev) // made by check
		var resumed []string
		var held []*journal.Run
		var deadlines []newDeadline
		err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			if err := journal.AppendEntry(ctx, tx, in.RunID, in.Number, e, inv.limits.Bounds()); err != nil {
				return err
			}
			// The entry's fenced insert share-locks the run, so it is running and ours.
			runs, err := journal.RunsByID(ctx, tx, []string{in.RunID})
			if err != nil {
				return err
			}
			if len(runs) != 1 {
				return journal.ErrSuperseded
			}
			run := runs[0]
			sent, created, started, err := inv.sendEvent(ctx, tx, journal.NewEvent{
				Tenant: run.Tenant, ID: ev.ID, Name: ev.Name, Data: ev.Data, Identity: run.Identity,
				SourceRunID: &run.ID, MaxTenantRuns: inv.limits.MaxTenantRuns,
				MaxTenantJournalBytes: inv.limits.MaxTenantJournalBytes, MaxTenantEventBytes: inv.limits.MaxTenantEventBytes,
			})
			if created {
				resumed, held, deadlines = sent.Resumed, sent.Held, started
			}
			return err
		})
		if err == nil {
			inv.armDeadlines(deadlines)
			inv.wakeAll(resumed)
			for _, run := range held {
				inv.armHeld(run)
			}
		}
		return CheckpointAck{}, inv.failOnCheckpoint(ctx, in.RunID, in.Number, err)
	},
}
