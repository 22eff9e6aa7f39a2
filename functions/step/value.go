package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// SetValue publishes value (encoded as JSON) as the run's latest value under key, for
// clients to read before the run ends: a progress percentage, a checkout URL to hand
// back to a user. It is the run's next entry (of kind value): once SetValue returns the
// value is durable, and GET /v1/runs/{id}/values/{key} answers it (a client waiting
// there with ?wait= and after= the version it has is answered at once). A later
// SetValue of the key replaces the value; earlier ones stay in the journal. On replay
// the journaled entry returns nil at once and nothing is sent again.
//
// Like a step, SetValue takes a seq: call it between steps, from the function's
// goroutine, not inside a step's function ([ErrNested]); to report progress from inside
// a step, write to a [Stream]. The value counts against the journal's bounds
// (STEPGATE_MAX_OUTPUT_BYTES for one entry): past them the run fails.
//
// key must be 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or
// digit. It returns a non-retryable error, without taking a seq, for a bad key or a
// value that does not encode as JSON; [ErrNoInvocation] when ctx is not an invocation's.
func SetValue(ctx context.Context, key string, value any) error {
	if err := names.CheckFunction("value key", key); err != nil {
		return NonRetryable(fmt.Errorf("step: %w", err))
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return NonRetryable(fmt.Errorf("step: value %q: encode: %w", key, err))
	}
	st, seq, e, err := next(ctx, protocol.EntryKindValue, key)
	if err != nil || e != nil {
		return err
	}
	if err := st.Err(); err != nil {
		return st.Halt(invocation.Retry("canceled", fmt.Sprintf("value %d %q: %v", seq, key, err)))
	}
	now := time.Now().UTC()
	return st.Checkpoint(&protocol.JournalEntry{
		Seq: seq, Kind: protocol.EntryKindValue, Name: key, Output: (*protocol.AnyJSON)(&raw),
		StartedAt: &now, FinishedAt: &now,
	})
}
