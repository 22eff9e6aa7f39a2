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

// Receive returns the wait for the oldest message of topic in the run's mailbox: its
// [Future.Get] takes that message, or suspends the run until one is sent to it, and
// returns it; when the [Timeout] option's duration (1s to 10 years; defaults to 24h)
// passes first, it returns an error that is [ErrTimedOut]. Nothing of the run lives in
// memory while it waits. The entry is named after topic. Making the future takes no seq
// and takes no message: Get does (see [Future]); in [WaitFirst], the message is taken
// only if the receive is the future chosen.
//
// Messages come from [Send] in other runs (or this one) and from clients
// (POST /v1/runs/{id}/messages). It is a mailbox: a message sent before the receive
// waits for it, messages of a topic are taken in the order the mailbox got them, and
// each is taken by one receive, once. The gateway journals the message at the wait's
// seq with its sender's identity, in the transaction that takes it, so a replay returns
// the same message without waiting.
//
// Receive takes the option [Timeout]. topic must be 1 to 255 bytes; otherwise, as for
// an option it does not take, Get returns a non-retryable error without taking a seq. A
// journaled message whose data does not decode into T halts the invocation (retried),
// as a step's output would.
func Receive[T any](ctx context.Context, topic string, opts ...Option) *Future[Message[T]] {
	p, bad := optionsFor("Receive", opts, "Timeout")
	w := wait{
		kind: protocol.EntryKindReceive, name: topic, timeout: p.timeout,
		await: protocol.Await{Type: protocol.AwaitTypeReceive, Topic: &topic},
	}
	return newWait(ctx, w, messageFrom[T], bad)
}

// messageFrom reads a journaled receive entry (or a wait_any's, unwrapped).
func messageFrom[T any](st *invocation.State, e *protocol.JournalEntry) (Message[T], error) {
	var out Message[T]
	seq, topic := e.Seq, e.Name
	got, err := replay[receivedEntry](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut || got.Message == nil {
		return out, timedOut("receive", seq, topic)
	}
	m := got.Message
	out = Message[T]{ID: m.ID, Topic: m.Topic, Sender: m.Identity, SenderRun: m.SourceRunID, SentAt: m.SentAt}
	return out, decodeJournaled(st, "receive", seq, topic, m.Data, &out.Data)
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
