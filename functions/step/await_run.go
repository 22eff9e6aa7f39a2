package step

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// AwaitRun returns the wait called name for the end of the run runID of this run's
// tenant: any run, not only a child (one a client started, a schedule, another run).
// Its [Future.Get] suspends the run until that run ends, then returns its output
// decoded into T when it completed, or an [*Error] whose Type is its error's type when
// it failed ("cancelled" when it was cancelled), [ErrorTypeNotFound] when the tenant has
// no such run, or [ErrorTypeForbidden] when this run's identity may not read runs (it
// needs runs:read, as a caller of GET /v1/runs/{id}); when the [Timeout] option's
// duration (1s to 10 years; defaults to 24h) passes first, an error that is
// [ErrTimedOut]. A run that has ended already is returned at once. The gateway journals
// the end at the wait's seq in the transaction of the run's end, so a replay returns
// the same outcome without waiting. It may be one of [WaitFirst]'s futures. Making the
// future takes no seq and waits for nothing: Get does.
//
// AwaitRun takes the option [Timeout]. name must be 1 to 255 bytes and runID a run id
// (a UUID); otherwise, as for an option it does not take, Get returns a non-retryable
// error without taking a seq. A run may not await itself: the gateway fails it.
func AwaitRun[T any](ctx context.Context, name, runID string, opts ...Option) *Future[T] {
	p, bad := optionsFor("AwaitRun", opts, "Timeout")
	if len(runID) != 36 && bad == nil {
		bad = NonRetryable(fmt.Errorf("step: AwaitRun %q: run id %q is not a UUID", name, runID))
	}
	w := wait{
		kind: protocol.EntryKindAwaitRun, name: name, timeout: p.timeout,
		await: protocol.Await{Type: protocol.AwaitTypeAwaitRun, RunID: &runID},
	}
	return newWait(ctx, w, runEndFrom[T], bad)
}

// runEndFrom reads a journaled await_run entry (or a wait_any's, unwrapped).
func runEndFrom[T any](st *invocation.State, e *protocol.JournalEntry) (T, error) {
	var out T
	var got struct {
		TimedOut bool `json:"timed_out"`
		Run      *struct {
			Status string              `json:"status"`
			Output json.RawMessage     `json:"output"`
			Error  *protocol.ErrorInfo `json:"error"`
		} `json:"run"`
	}
	if e.Error != nil {
		return out, &Error{Seq: e.Seq, Name: e.Name, Type: e.Error.Type, Message: e.Error.Message}
	}
	if e.Output != nil {
		if err := json.Unmarshal(*e.Output, &got); err != nil {
			return out, st.Halt(invocation.Retry("replay", fmt.Sprintf("await_run %d %q: decode journaled output: %v", e.Seq, e.Name, err)))
		}
	}
	switch {
	case got.TimedOut || got.Run == nil:
		return out, timedOut("await_run", e.Seq, e.Name)
	case got.Run.Error != nil:
		return out, &Error{Seq: e.Seq, Name: e.Name, Type: got.Run.Error.Type, Message: got.Run.Error.Message}
	}
	return out, decodeJournaled(st, "await_run", e.Seq, e.Name, got.Run.Output, &out)
}
