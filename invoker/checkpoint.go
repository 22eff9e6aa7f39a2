package invoker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// Invocation names the invocation a function's request speaks for: its run and the
// run's invocation number, as its invocation token binds them.
type Invocation struct {
	RunID  string
	Number int
}

// CheckpointAck is what the gateway answers a journaled checkpoint with, beyond its seq.
type CheckpointAck struct {
	// Output is the entry's output as the gateway made it, for kinds whose output the
	// gateway writes (a callback's URL and token); nil otherwise.
	Output json.RawMessage
	// Until is the wake time of a sleep waited out in the function's process.
	Until *time.Time
	// Refused is why a send's message could not be delivered, journaled as the entry's
	// error; nil when it was.
	Refused *protocol.ErrorInfo
}

// BadCheckpointError is a checkpoint the journal could never hold (the gateway's 400):
// Message says which field and why.
type BadCheckpointError struct{ Message string }

func (e *BadCheckpointError) Error() string { return e.Message }

// badCheckpoint returns a *BadCheckpointError.
func badCheckpoint(format string, args ...any) error {
	return &BadCheckpointError{Message: fmt.Sprintf(format, args...)}
}

// checkpointKind is one kind of entry a function journals from its process (a
// checkpoint), registered in checkpointKinds: how to check it, and how to journal it
// with what it does. Each kind lives in its own file (checkpoint_<kind>.go), which
// registers it, but for the plain ones below.
type checkpointKind struct {
	// check returns a *BadCheckpointError when e can never be journaled, after the
	// checks every kind shares (checkEntry); it may fill in e's defaults. nil means
	// no more checks.
	check func(in Invocation, e *protocol.JournalEntry) error
	// journal journals e for in, fenced as any entry (journal.AppendEntry), with what
	// the kind does in the same transaction; errors are as Checkpoint's.
	journal func(inv *Invoker, ctx context.Context, in Invocation, e protocol.JournalEntry) (CheckpointAck, error)
}

// checkpointKinds are the kinds of entries a function may checkpoint, by kind: the two
// plain ones here, and each other kind, registered by its own file
// (checkpoint_<kind>.go). A kind not here (an await's entry, such as a wait_event's) is
// journaled by the gateway only.
var checkpointKinds = map[protocol.EntryKind]checkpointKind{}

func init() {
	// Here rather than in the map's literal: the kinds' functions lead back to it (a
	// duplex invocation serves its checkpoints through Checkpoint).
	checkpointKinds[protocol.EntryKindStep] = plainCheckpoint
	checkpointKinds[protocol.EntryKindPatch] = patchCheckpoint
}

// plainCheckpoint: a finished step, journaled as it is.
var plainCheckpoint = checkpointKind{
	journal: func(inv *Invoker, ctx context.Context, in Invocation, e protocol.JournalEntry) (CheckpointAck, error) {
		return CheckpointAck{}, inv.appendCheckpoint(ctx, in.RunID, in.Number, entryFromAPI(e))
	},
}

// patchCheckpoint: a patch marker (step.Patched), journaled as it is; it has no output.
var patchCheckpoint = checkpointKind{
	check: func(_ Invocation, e *protocol.JournalEntry) error {
		if e.Output != nil || e.Error != nil {
			return badCheckpoint("a patch marker has no output or error")
		}
		return nil
	},
	journal: plainCheckpoint.journal,
}

// Append journals e, a checkpoint of invocation in, as its kind says
// (checkpointKinds), within the invoker's bounds. A checkpoint the journal could never
// hold is a *BadCheckpointError naming the field. An entry that contradicts the journal
// (journal.ErrConflict), passes a bound (a *journal.LimitError) or the tenant's quota (a
// *journal.QuotaError) also fails the run, in the invocation's name, so that invocation
// can no longer complete it whatever it answers; journal.ErrSuperseded when in no
// longer owns the run, journal.ErrGap for a seq past the journal's window. A repeated
// checkpoint (the same entry again) is journaled once and answered alike.
func (c *Checkpoints) Append(ctx context.Context, in Invocation, e protocol.JournalEntry) (CheckpointAck, error) {
	inv := c.inv
	kind, ok := checkpointKinds[e.Kind]
	if !ok {
		return CheckpointAck{}, badCheckpoint("a checkpoint is an entry of kind %s, not %q", checkpointKindList(), e.Kind)
	}
	if err := inv.checkEntry(e); err != nil {
		return CheckpointAck{}, err
	}
	if kind.check != nil {
		if err := kind.check(in, &e); err != nil {
			return CheckpointAck{}, err
		}
	}
	return kind.journal(inv, ctx, in, e)
}

// checkEntry returns a *BadCheckpointError naming the field when e could never be an
// entry of the journal, whatever its kind: a seq out of range, a bad name, values
// Postgres cannot store. An output past the limit is the run's failure, not a
// *BadCheckpointError (see Checkpoint).
func (inv *Invoker) checkEntry(e protocol.JournalEntry) error {
	switch {
	case e.Seq < 1 || e.Seq > math.MaxInt32:
		return badCheckpoint("seq %d is not from 1 to %d", e.Seq, math.MaxInt32)
	case e.Output != nil && e.Error != nil:
		return badCheckpoint("a step has an output or an error, not both")
	case e.Attempt != nil && (*e.Attempt < 0 || *e.Attempt > inv.limits.MaxAttempts):
		return badCheckpoint("attempt %d is not from 1 to %d", *e.Attempt, inv.limits.MaxAttempts)
	case e.Window != nil && (*e.Window < 1 || *e.Window > journal.MaxWindow):
		return badCheckpoint("window %d is not from 1 to %d", *e.Window, journal.MaxWindow)
	}
	if err := names.Check("name", e.Name); err != nil {
		return badCheckpoint("%v", err)
	}
	if e.Output != nil {
		if err := storable.CheckJSON(*e.Output); err != nil {
			return badCheckpoint("output %v", err)
		}
	}
	if e.Error != nil {
		for _, f := range []struct{ field, v string }{{"type", e.Error.Type}, {"message", e.Error.Message}} {
			if err := storable.CheckText(f.v); err != nil {
				return badCheckpoint("error.%s %v", f.field, err)
			}
		}
	}
	return nil
}

// checkpointKindList returns the checkpoint kinds, quoted and sorted, for messages.
func checkpointKindList() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(checkpointKinds)) {
		out = append(out, fmt.Sprintf("%q", k))
	}
	return strings.Join(out[:len(out)-1], ", ") + " or " + out[len(out)-1]
}
