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

// Error types of a [Send] whose message could not be sent, besides [ErrorTypeNotFound]
// (no such run in the run's tenant).
const (
	ErrorTypeFinished = "finished"       // the target run is completed, failed or cancelled
	ErrorTypeLimit    = "limit_exceeded" // the target's mailbox holds 1000 messages not yet received
)

// Send sends a message of topic with data (encoded as JSON) to the run runID of the
// same tenant, as the run's next entry (named after topic): the gateway stores it in the
// target's mailbox with this run's identity as its sender, in the transaction that
// journals the entry, and the target takes it with [Receive]. On replay the journaled
// entry returns at once and nothing is sent again.
//
// The message's id, which deduplicates the target's messages, is "<run id>:<seq>", so a
// checkpoint that is retried, or an invocation retried after the send, sends the message
// once.
//
// A message that cannot be sent is journaled as such and returned, now and on every
// replay, as an [*Error] of type [ErrorTypeNotFound] (no run runID in this run's tenant;
// another tenant's runs are never looked at), [ErrorTypeForbidden] (the target's
// function lets this run's identity neither invoke it nor resume it: its invoke_roles
// and resume_roles), [ErrorTypeFinished] (the target has finished) or [ErrorTypeLimit]
// (its mailbox is full); the function may handle it and go on.
//
// topic must be 1 to 255 bytes and runID a run id (a UUID); otherwise, or when data does
// not encode as JSON, it returns a non-retryable error without taking a seq. It returns
// [ErrNoInvocation] when ctx is not an invocation's.
func Send(ctx context.Context, runID, topic string, data any) error {
	if !isUUID(runID) {
		return NonRetryable(fmt.Errorf("step: send %q: %q is not a run id (a UUID)", topic, runID))
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return NonRetryable(fmt.Errorf("step: send %q: encode data: %w", topic, err))
	}
	st, seq, e, err := next(ctx, protocol.EntryKindSend, topic)
	if err != nil {
		return err
	}
	if e != nil {
		if e.Error != nil {
			return &Error{Seq: e.Seq, Name: e.Name, Type: e.Error.Type, Message: e.Error.Message}
		}
		return nil
	}
	if err := st.Err(); err != nil {
		return st.Halt(invocation.Retry("canceled", fmt.Sprintf("send %d %q: %v", seq, topic, err)))
	}
	out, err := json.Marshal(struct {
		RunID string          `json:"run_id"`
		Topic string          `json:"topic"`
		Data  json.RawMessage `json:"data"`
		ID    string          `json:"id"`
	}{runID, topic, raw, st.Req.Run.ID + ":" + strconv.Itoa(seq)})
	if err != nil {
		return st.Halt(invocation.Failed("output", fmt.Sprintf("send %d %q: encode: %v", seq, topic, err)))
	}
	now := time.Now().UTC()
	ack, err := st.CheckpointAck(&protocol.JournalEntry{
		Seq: seq, Kind: protocol.EntryKindSend, Name: topic, Output: (*protocol.AnyJSON)(&out),
		StartedAt: &now, FinishedAt: &now,
	})
	if err != nil {
		return err
	}
	if ack != nil && ack.Error != nil {
		return &Error{Seq: seq, Name: topic, Type: ack.Error.Type, Message: ack.Error.Message}
	}
	return nil
}

// isUUID reports whether s is a UUID in its textual form (8-4-4-4-12 hex digits).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}
