package invoker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// MaxSleepInProcess bounds a sleep that a function waits out in its process (a
// checkpointed sleep): its invocation must last that long, which the function's timeout
// bounds too.
const MaxSleepInProcess = time.Hour

// ErrBadSleep: a checkpointed sleep the gateway refuses (the message says why).
var ErrBadSleep = errors.New("bad sleep")

// CheckpointSleep journals a sleep that invocation waits out in its process, and
// returns its wake time: e.Until, or, with e.Output {"duration": "<Go duration>"}, that
// long from now on the gateway's clock. The run stays running: if the invocation fails
// while the function waits, its retry is not due before that time (see journal.Finish
// and journal.ReapExpiredLeases). A repeated checkpoint returns the journaled time.
func (inv *Invoker) CheckpointSleep(ctx context.Context, runID string, invocation int, checkpoint protocol.JournalEntry) (time.Time, error) {
	e := entryFromAPI(checkpoint)
	switch {
	case e.Error != nil:
		return time.Time{}, fmt.Errorf("%w: a sleep has no error", ErrBadSleep)
	case e.WakeAt != nil && e.Output != nil:
		return time.Time{}, fmt.Errorf("%w: a sleep has until or output {\"duration\"}, not both", ErrBadSleep)
	case e.WakeAt == nil && e.Output == nil:
		return time.Time{}, fmt.Errorf("%w: a sleep has until or output {\"duration\": \"<duration>\"}", ErrBadSleep)
	}
	now := time.Now()
	if e.Output != nil {
		var o struct {
			Duration *string `json:"duration"`
		}
		if json.Unmarshal(e.Output, &o) != nil || o.Duration == nil {
			return time.Time{}, fmt.Errorf("%w: a sleep's output is {\"duration\": \"<duration>\"}", ErrBadSleep)
		}
		d, err := time.ParseDuration(*o.Duration)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%w: duration %q is not a duration of 0s or more, such as \"250ms\"", ErrBadSleep, *o.Duration)
		}
		at := now.Add(d).Truncate(time.Microsecond) // Postgres keeps microseconds
		e.WakeAt, e.Output = &at, nil
	}
	if d := e.WakeAt.Sub(now); d > MaxSleepInProcess {
		return time.Time{}, fmt.Errorf("%w: a sleep of %s in the function's process is longer than the limit of %s: suspend the run instead (await sleep)",
			ErrBadSleep, d.Round(time.Second), MaxSleepInProcess)
	}
	if err := inv.appendCheckpoint(ctx, runID, invocation, e); err != nil {
		return time.Time{}, err
	}
	at, err := journal.EntryWakeAt(ctx, inv.pool, runID, e.Seq)
	if err != nil {
		return time.Time{}, err
	}
	return at, nil
}
