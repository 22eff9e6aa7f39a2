package step

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// After returns a timer called name that passes d after it is waited for: its
// [Future.Get] suspends the run for d from when the gateway receives the answer (on the
// database clock; a negative d counts as zero), as [Sleep] does, and returns a zero
// struct{} and nil once it has passed. Making the timer takes no seq and starts
// nothing: d counts from the wait, so for a deadline fixed in advance use [At] with a
// time from [Now].
//
// In [WaitFirst] the timer is the wait_any's timeout: it comes when d has passed since
// the wait was stored, unless another future comes first. name must be 1 to 255 bytes;
// otherwise Get returns a non-retryable error without taking a seq. After takes no
// option.
func After(ctx context.Context, name string, d time.Duration) *Future[struct{}] {
	d = max(d, 0)
	return timer(ctx, name, func() time.Duration { return d }, protocol.Await{Duration: new(d.String())})
}

// At returns a timer called name that passes at t, as [After] does after a duration:
// its Get suspends the run until t (waited out in the process when t is near). In
// [WaitFirst], the timeout is what is left until t when the wait is stored.
func At(ctx context.Context, name string, t time.Time) *Future[struct{}] {
	return timer(ctx, name, func() time.Duration { return time.Until(t) }, protocol.Await{Until: new(t.UTC())})
}

// Sleep is After(ctx, name, d).Get(): it suspends the run for d from when the gateway
// receives the answer (on the database clock); a negative d counts as zero. The gateway
// journals the sleep and invokes the function again when it is over; there, the
// journaled sleep returns nil at once. Sleep never returns while the run sleeps: it
// unwinds the invocation.
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
	return resolve(&After(ctx, name, d).f)
}

// SleepUntil is At(ctx, name, t).Get(): it suspends the run until t, like [Sleep]
// (waited out in the process when t is near).
func SleepUntil(ctx context.Context, name string, t time.Time) error {
	return resolve(&At(ctx, name, t).f)
}

// timer returns the future of a timer whose await is aw and left says how long is left.
func timer(ctx context.Context, name string, left func() time.Duration, aw protocol.Await) *Future[struct{}] {
	aw.Type = protocol.AwaitTypeSleep
	w := wait{kind: protocol.EntryKindSleep, name: name, await: aw, timer: left, get: waitTimer}
	return newWait(ctx, w, func(*invocation.State, *protocol.JournalEntry) (struct{}, error) { return struct{}{}, nil }, nil)
}

// waitTimer waits for the timer w alone: a sleep.
func waitTimer(ctx context.Context, w *wait) error {
	return sleep(ctx, w.name, w.timer(), w.await)
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
