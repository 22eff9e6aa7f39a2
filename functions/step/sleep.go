package step

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Sleep suspends the run for d from when the gateway receives the answer (on the
// database clock); a negative d counts as zero. The gateway journals the sleep and
// invokes the function again when it is over; there, the journaled sleep returns nil at
// once. Sleep never returns while the run sleeps: it unwinds the invocation. It returns
// [ErrNoInvocation] when ctx is not an invocation's, and a non-retryable error when name
// is not 1 to 255 bytes.
func Sleep(ctx context.Context, name string, d time.Duration) error {
	return sleep(ctx, name, protocol.Await{Duration: new(max(d, 0).String())})
}

// SleepUntil suspends the run until t, like [Sleep].
func SleepUntil(ctx context.Context, name string, t time.Time) error {
	return sleep(ctx, name, protocol.Await{Until: new(t.UTC())})
}

func sleep(ctx context.Context, name string, aw protocol.Await) error {
	st, seq, e, err := next(ctx, protocol.EntryKindSleep, name)
	if err != nil || e != nil {
		return err
	}
	aw.Type, aw.Seq, aw.Name = protocol.AwaitTypeSleep, seq, name
	return st.Halt(invocation.Suspended(&aw))
}
