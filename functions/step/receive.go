package step

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Message is a message a run received, with its data decoded into T.
type Message[T any] struct {
	ID     string
	Topic  string
	Data   T
	Sender invocation.Identity // A functions.Identity: who sent it (the caller's token, or the run that sent it).
	// SenderRun is the run that sent it with [Send]; empty for a message sent through
	// the API (POST /v1/runs/{id}/messages).
	SenderRun string
	SentAt    time.Time // When the gateway stored it (database clock).
}

// Received is the outcome of [Receive]: the message, or TimedOut when the timeout
// passed first.
type Received[T any] struct {
	Message  Message[T]
	TimedOut bool
}

// Receive takes the oldest message of topic from the run's mailbox, or suspends the run
// until one is sent to it or timeout passes (from 1s to 10 years; 0 means 24h), and
// returns which: the message, or TimedOut. Nothing of the run lives in memory while it
// waits. The entry is named after topic.
//
// Messages come from [Send] in other runs (or this one) and from clients
// (POST /v1/runs/{id}/messages). It is a mailbox: a message sent before the receive
// waits for it, messages of a topic are taken in the order the mailbox got them, and
// each is taken by one receive, once. The gateway journals the message at this step's
// seq with its sender's identity, in the transaction that takes it, so a replay returns
// the same message without waiting.
//
// topic must be 1 to 255 bytes; otherwise it returns a non-retryable error without
// taking a seq. It returns [ErrNoInvocation] when ctx is not an invocation's. A
// journaled message whose data does not decode into T halts the invocation (retried),
// as a step's output would.
func Receive[T any](ctx context.Context, topic string, timeout time.Duration) (Received[T], error) {
	var out Received[T]
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindReceive, topic)
	if err != nil {
		return out, err
	}
	if e == nil {
		aw := &protocol.Await{Type: protocol.AwaitTypeReceive, Seq: seq, Name: topic, Topic: &topic}
		return out, suspend(st, aw, timeout)
	}
	return receivedFrom[T](st, e)
}

// receivedFrom reads a journaled receive entry (or a wait_any's, unwrapped).
func receivedFrom[T any](st *invocation.State, e *protocol.JournalEntry) (Received[T], error) {
	var out Received[T]
	seq, topic := e.Seq, e.Name
	got, err := replay[receivedEntry](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut || got.Message == nil {
		out.TimedOut = true
		return out, nil
	}
	m := got.Message
	out.Message = Message[T]{ID: m.ID, Topic: m.Topic, Sender: m.Identity, SenderRun: m.SourceRunID, SentAt: m.SentAt}
	return out, decodeJournaled(st, "receive", seq, topic, m.Data, &out.Message.Data)
}

// receivedEntry is the output of a receive entry.
type receivedEntry struct {
	TimedOut bool `json:"timed_out"`
	Message  *struct {
		ID          string              `json:"id"`
		Topic       string              `json:"topic"`
		Data        json.RawMessage     `json:"data"`
		Identity    invocation.Identity `json:"identity"`
		SourceRunID string              `json:"source_run_id"`
		SentAt      time.Time           `json:"sent_at"`
	} `json:"message"`
}
