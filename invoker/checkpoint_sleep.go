package invoker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// MaxSleepInProcess bounds a sleep that a function waits out in its process (a
// checkpointed sleep): its invocation must last that long, which the function's timeout
// bounds too.
const MaxSleepInProcess = time.Hour

// sleepCheckpoint: a sleep that the invocation waits out in its process, journaled with
// its wake time, which the answer's until gives: the entry's until, or, with output
// {"duration": "<Go duration>"}, that long from now on the gateway's clock (at most
// MaxSleepInProcess). The run stays running: if the invocation fails while the function
// waits, its retry is not due before that time (see journal.Finish and
// journal.ReapExpiredLeases). A repeated checkpoint answers the journaled time.
func init() { checkpointKinds[protocol.EntryKindSleep] = sleepCheckpoint }

var sleepCheckpoint = checkpointKind{
	check: func(_ Invocation, e *protocol.JournalEntry) error {
		switch {
		case e.Error != nil:
			return badCheckpoint("a sleep has no error")
		case e.Until != nil && e.Output != nil:
			return badCheckpoint("a sleep has until or output {\"duration\"}, not both")
		case e.Until == nil && e.Output == nil:
			return badCheckpoint("a sleep has until or output {\"duration\": \"<duration>\"}")
		}
		now := time.Now()
		if e.Output != nil {
			var o struct {
				Duration *string `json:"duration"`
			}
			if json.Unmarshal(*e.Output, &o) != nil || o.Duration == nil {
				return badCheckpoint("a sleep's output is {\"duration\": \"<duration>\"}")
			}
			d, err := time.ParseDuration(*o.Duration)
			if err != nil || d < 0 {
				return badCheckpoint("duration %q is not a duration of 0s or more, such as \"250ms\"", *o.Duration)
			}
			at := now.Add(d).Truncate(time.Microsecond) // Postgres keeps microseconds
			e.Until, e.Output = &at, nil
		}
		if d := e.Until.Sub(now); d > MaxSleepInProcess {
			return badCheckpoint("a sleep of %s in the function's process is longer than the limit of %s: suspend the run instead (await sleep)",
				d.Round(time.Second), MaxSleepInProcess)
		}
		return nil
	},
	journal: func(inv *Invoker, ctx context.Context, in Invocation, e protocol.JournalEntry) (CheckpointAck, error) {
		if err := inv.appendCheckpoint(ctx, in.RunID, in.Number, entryFromAPI(e)); err != nil {
			return CheckpointAck{}, err
		}
		at, err := journal.EntryWakeAt(ctx, inv.pool, in.RunID, e.Seq)
		if err != nil {
			return CheckpointAck{}, err
		}
		return CheckpointAck{Until: &at}, nil
	},
}
