package step

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Sleep suspends the run for d from when the gateway receives the answer (on the
// database clock); a negative d counts as zero. The gateway journals the sleep and
// invokes the function again when it is over; there, the journaled sleep returns nil at
// once. Sleep never returns while the run sleeps: it unwinds the invocation.
//
// A short sleep may be waited out in the function's process instead, in one invocation:
// when d is at most the function's in-process limit ([functions.SleepInProcess], none by
// default) and the invocation has time to spare, Sleep checkpoints the sleep (durable,
// with its wake time) and returns when that time comes. If the process dies meanwhile,
// the gateway calls the function again at that time, as for a suspended sleep.
//
// It returns [ErrNoInvocation] when ctx is not an invocation's, and a non-retryable
// error when name is not 1 to 255 bytes.
func Sleep(ctx context.Context, name string, d time.Duration) error {
	d = max(d, 0)
	return sleep(ctx, name, d, protocol.Await{Duration: new(d.String())})
}

// SleepUntil suspends the run until t, like [Sleep] (waited out in the process when
// t is near).
func SleepUntil(ctx context.Context, name string, t time.Time) error {
	return sleep(ctx, name, time.Until(t), protocol.Await{Until: new(t.UTC())})
}

func sleep(ctx context.Context, name string, d time.Duration, aw protocol.Await) error {
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindSleep, name)
	if err != nil {
		return err
	}
	if e != nil {
		// Journaled: the sleep is over, unless it was being waited out in a process that
		// stopped before its end (the gateway calls again at its end: this waits for
		// what is left of it, by this machine's clock).
		if e.Until != nil {
			if left := time.Until(*e.Until); left > 0 && st.SleepInProcess(left) {
				return st.WaitOut(ctx, left)
			}
		}
		return nil
	}
	if st.SleepInProcess(d) {
		entry := protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindSleep, Name: name, Until: aw.Until}
		if aw.Until == nil {
			out := protocol.AnyJSON(fmt.Appendf(nil, `{"duration":%q}`, *aw.Duration))
			entry.Output = &out
		}
		ack, err := st.CheckpointAck(&entry)
		if err != nil {
			return err
		}
		if ack.Until == nil {
			return st.Halt(invocation.Failed("protocol", fmt.Sprintf("sleep %d %q: the gateway answered its checkpoint without a wake time", seq, name)))
		}
		return st.WaitOut(ctx, time.Until(*ack.Until))
	}
	aw.Type, aw.Seq, aw.Name = protocol.AwaitTypeSleep, seq, name
	return st.Halt(invocation.Suspended(&aw))
}
