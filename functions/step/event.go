package step

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// SendEvent sends the event called name with data (encoded as JSON) to the gateway, as
// the run's next entry: the gateway stores it with the run's identity and starts a run
// of each function it triggers, in the transaction that journals the entry. On replay the
// journaled entry returns nil at once and nothing is sent again.
//
// The event's id, which deduplicates events, is "<run id>:<seq>", so a checkpoint that
// is retried, or an invocation retried after the send, sends the event once. Runs the
// event starts carry the run's identity.
//
// name must be 1 to 255 bytes. It returns a non-retryable error, without taking a seq,
// when data does not encode as JSON; [ErrNoInvocation] when ctx is not an invocation's.
func SendEvent(ctx context.Context, name string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return NonRetryable(fmt.Errorf("step: event %q: encode data: %w", name, err))
	}
	st, seq, e, err := next(ctx, protocol.EntryKindEvent, name)
	if err != nil || e != nil {
		return err
	}
	if err := st.Err(); err != nil {
		return st.Halt(invocation.Retry("canceled", fmt.Sprintf("event %d %q: %v", seq, name, err)))
	}
	out, err := json.Marshal(struct {
		Name string          `json:"name"`
		Data json.RawMessage `json:"data"`
		ID   string          `json:"id"`
	}{name, raw, st.Req.Run.ID + ":" + strconv.Itoa(seq)})
	if err != nil {
		return st.Halt(invocation.Failed("output", fmt.Sprintf("event %d %q: encode: %v", seq, name, err)))
	}
	now := time.Now().UTC()
	return st.Checkpoint(&protocol.JournalEntry{
		Seq: seq, Kind: protocol.EntryKindEvent, Name: name, Output: (*protocol.AnyJSON)(&out),
		StartedAt: &now, FinishedAt: &now,
	})
}
