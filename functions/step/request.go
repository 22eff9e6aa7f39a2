package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// requestTopicPrefix begins the topic of a request: the requests named name are the
// messages of topic "request:"+name (the gateway's journal.RequestTopic).
const requestTopicPrefix = "request:"

// ErrorTypeReply is the type of the error reply [ReplyError] sends for an error that is
// not an [*Error].
const ErrorTypeReply = "error"

// Request is a request a run received ([ReceiveRequest]), with its data decoded into T.
type Request[T any] struct {
	ID     string // The request's id: what [Reply] and [ReplyError] take.
	Name   string // The request's name, as the client sent it.
	Data   T
	Sender invocation.Identity // A functions.Identity: who sent it (the caller's token).
	SentAt time.Time           // When the gateway stored it (database clock).
}

// ReceiveRequest returns the wait for the oldest request called name that the run has
// not received (a client's POST /v1/runs/{id}/requests): its [Future.Get] takes that
// request, or suspends the run until one is sent, and returns it; when the [Timeout]
// option's duration (1s to 10 years; defaults to 24h) passes first, it returns an error
// that is [ErrTimedOut]. It is [Receive] of the topic "request:"+name, which the entry
// is named after, with all that Receive guarantees: making the future takes no seq and
// takes no request, Get does (see [Future]); in [WaitFirst], the request is taken only
// if this future is the one chosen; a replay returns the same request without waiting.
//
// The client waits for the reply: answer each request received with [Reply] or
// [ReplyError], once. A request the run has not replied to when it ends is answered by
// the gateway with an error saying the run ended without replying.
//
// ReceiveRequest takes the option [Timeout]. name must be 1 to 247 bytes (its topic 1
// to 255); otherwise, as for an option it does not take, Get returns a non-retryable
// error without taking a seq. A journaled request whose data does not decode into T
// halts the invocation (retried), as a step's output would.
func ReceiveRequest[T any](ctx context.Context, name string, opts ...Option) *Future[Request[T]] {
	p, bad := optionsFor("ReceiveRequest", opts, "Timeout")
	if name == "" && bad == nil {
		bad = NonRetryable(errors.New("step: receive request: the request name is empty"))
	}
	topic := requestTopicPrefix + name
	w := wait{
		kind: protocol.EntryKindReceive, name: topic, timeout: p.timeout,
		await: protocol.Await{Type: protocol.AwaitTypeReceive, Topic: &topic},
	}
	// The journaled entry is a receive's: it reads as Receive's message.
	return newWait(ctx, w, func(st *invocation.State, e *protocol.JournalEntry) (Request[T], error) {
		m, err := messageFrom[T](st, e)
		return Request[T]{ID: m.ID, Name: name, Data: m.Data, Sender: m.Sender, SentAt: m.SentAt}, err
	}, bad)
}

// Reply replies value (encoded as JSON) to the request requestID (a [Request]'s ID) that
// the run received, as the run's next entry, of kind reply, named requestID: it returns
// once the gateway has journaled it (durable), and the client waiting on the request
// gets it. On replay the journaled entry returns at once and nothing is sent again.
//
// A request takes one reply. The gateway refuses (400) a reply to a request the run has
// not received before it (or that does not exist), or has replied to already: the run
// then fails, non-retryable, with an error saying why, and Reply does not return. When
// value does not encode as JSON, or requestID is not 1 to 255 bytes, it returns a
// non-retryable error without taking a seq. It returns [ErrNoInvocation] when ctx is
// not an invocation's.
func Reply(ctx context.Context, requestID string, value any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return NonRetryable(fmt.Errorf("step: reply to request %q: encode value: %w", requestID, err))
	}
	return reply(ctx, requestID, protocol.JournalEntry{Output: (*protocol.AnyJSON)(&raw)})
}

// ReplyError replies an error to the request requestID, as [Reply] replies a value: the
// client gets an error whose type is err's, when err is (or wraps) an [*Error], or else
// [ErrorTypeReply], and whose message is err.Error(). A nil err is a non-retryable
// error, and takes no seq.
func ReplyError(ctx context.Context, requestID string, err error) error {
	if err == nil {
		return NonRetryable(fmt.Errorf("step: reply an error to request %q: the error is nil", requestID))
	}
	typ := ErrorTypeReply
	if se := (*Error)(nil); errors.As(err, &se) && se.Type != "" {
		typ = se.Type
	}
	return reply(ctx, requestID, protocol.JournalEntry{Error: &protocol.ErrorInfo{Type: typ, Message: err.Error()}})
}

// reply journals e, a reply's output or error, at the next seq, named requestID.
func reply(ctx context.Context, requestID string, e protocol.JournalEntry) error {
	st, seq, got, err := next(ctx, protocol.EntryKindReply, requestID)
	if err != nil || got != nil {
		return err // a journaled reply (even an error reply) is a reply sent: nothing to return
	}
	if err := st.Err(); err != nil {
		return st.Halt(invocation.Retry("canceled", fmt.Sprintf("reply %d %q: %v", seq, requestID, err)))
	}
	now := time.Now().UTC()
	e.Seq, e.Kind, e.Name, e.StartedAt, e.FinishedAt = seq, protocol.EntryKindReply, requestID, &now, &now
	return st.Checkpoint(&e)
}
