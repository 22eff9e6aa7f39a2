package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// ErrorTypeRejected is the type of a callback's rejection that names none.
const ErrorTypeRejected = "rejected"

// Resolvers of a callback, in [OpenCallback].Resolver.
const (
	ResolverToken    = "token"    // whoever held the callback's URL (no identity)
	ResolverIdentity = "identity" // a caller with a JWT and runs:manage, by run id and name
)

// OpenCallback is a callback a run made with [Callback]: hand its URL to whoever must
// resolve it, and wait for its resolution with [OpenCallback.Result]. (It is not called
// Callback, the name of the function that makes it.)
type OpenCallback[T any] struct {
	Seq  int    // The callback's seq in the run.
	Name string // The callback's name.
	// URL resolves the callback: POST it a JSON body (the data), or POST URL+"/reject"
	// an error {"type"?, "message"}. It needs no other credential: treat it as a secret.
	URL string
	// Token is the last segment of URL: 256 random bits made by the gateway, the
	// credential for this callback alone.
	Token string
	// ExpiresAt is when the callback stops taking a resolution (database clock), as its
	// [Timeout] option set it; a [WaitFirst] with a timer may end it sooner.
	ExpiresAt time.Time

	// Resolver says who resolved or rejected it, once Result's future has its outcome:
	// ResolverToken or ResolverIdentity ("" before, or when it timed out); ResolvedBy is
	// the caller's identity for ResolverIdentity, else nil.
	Resolver   string
	ResolvedBy *invocation.Identity // A *functions.Identity.
	ResolvedAt time.Time            // Database clock.

	result *Future[T]
}

// Callback makes a callback called name, as the run's next entry: the gateway makes an
// unguessable token for it and its URL, and journals them, so that a replay returns the
// same callback and no second one is made. Hand the URL to the outside world in a later
// step (an email, a chat message, a payment provider's webhook setting), then wait for
// its [OpenCallback.Result]. A resolution that comes before the run waits for it is
// kept, and the wait returns it at once.
//
// Callback takes the option [Timeout]: how long the callback stays open (1s to 8760h;
// defaults to 168h). name must be 1 to 255 bytes; otherwise, as for an option it does
// not take, it returns a non-retryable error without taking a seq. It returns
// [ErrNoInvocation] when ctx is not an invocation's.
func Callback[T any](ctx context.Context, name string, opts ...Option) (*OpenCallback[T], error) {
	p, err := optionsFor("Callback", opts, "Timeout")
	if err != nil {
		return nil, err
	}
	st, seq, e, err := next(ctx, protocol.EntryKindCallback, name)
	if err != nil {
		return nil, err
	}
	var out json.RawMessage
	if e != nil {
		if e.Output != nil {
			out = json.RawMessage(*e.Output)
		}
	} else {
		if err := st.Err(); err != nil {
			return nil, st.Halt(invocation.Retry("canceled", fmt.Sprintf("callback %d %q: %v", seq, name, err)))
		}
		now := time.Now().UTC()
		entry := &protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindCallback, Name: name, StartedAt: &now, FinishedAt: &now}
		if p.timeout > 0 {
			raw, _ := json.Marshal(map[string]string{"timeout": p.timeout.String()})
			entry.Output = (*protocol.AnyJSON)(&raw)
		}
		ack, err := st.CheckpointAck(entry)
		if err != nil {
			return nil, err
		}
		if ack.Output != nil {
			out = json.RawMessage(*ack.Output)
		}
	}
	var got struct {
		URL       string    `json:"url"`
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Token == "" {
		return nil, st.Halt(invocation.Retry("callback", fmt.Sprintf(
			"callback %d %q: the gateway gave no token (output %s)", seq, name, out)))
	}
	cb := &OpenCallback[T]{Seq: seq, Name: name, URL: got.URL, Token: got.Token, ExpiresAt: got.ExpiresAt}
	w := wait{
		kind: protocol.EntryKindAwaitCallback, name: name,
		await: protocol.Await{Type: protocol.AwaitTypeAwaitCallback, CallbackSeq: &cb.Seq},
	}
	cb.result = newWait(ctx, w, cb.resolution, nil)
	return cb, nil
}

// Result returns the wait for the callback's resolution (the same future on every
// call): its [Future.Get] suspends the run until the callback is resolved or rejected,
// or expires, and returns the data it was resolved with, decoded into T. A rejection
// returns an [*Error] whose Type is the rejection's ([ErrorTypeRejected] unless it named
// one) and whose Message is its message: the function may handle it and go on, and
// returning it fails the run. An expiry returns an error that is [ErrTimedOut]. The
// callback's Resolver fields say who resolved or rejected it.
//
// The wait is named after the callback. Making the future takes no seq: Get takes one
// (see [Future]); the resolution is journaled at that seq, with who resolved it, so a
// replay returns it without waiting. Journaled data that does not decode into T halts
// the invocation (retried), as a step's output would. Waiting for a callback of another
// run is impossible: the gateway fails the run (bad_answer) when it is not one of the
// run's callbacks.
func (c *OpenCallback[T]) Result() *Future[T] { return c.result }

// resolution reads a journaled await_callback entry (or a wait_any's, unwrapped).
func (c *OpenCallback[T]) resolution(st *invocation.State, e *protocol.JournalEntry) (T, error) {
	var out T
	seq, name := e.Seq, e.Name
	got, err := replay[callbackEntry](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut {
		return out, timedOut("callback", seq, name)
	}
	c.Resolver, c.ResolvedBy = got.Resolver, got.ResolvedBy
	if got.ResolvedAt != nil {
		c.ResolvedAt = *got.ResolvedAt
	}
	if got.Error != nil {
		return out, &Error{Seq: seq, Name: name, Type: got.Error.Type, Message: got.Error.Message}
	}
	return out, decodeJournaled(st, "callback", seq, name, got.Data, &out)
}

// callbackEntry is the output of an await_callback entry.
type callbackEntry struct {
	TimedOut   bool                 `json:"timed_out"`
	Data       json.RawMessage      `json:"data"`
	Error      *protocol.ErrorInfo  `json:"error"`
	Resolver   string               `json:"resolver"`
	ResolvedBy *invocation.Identity `json:"resolved_by"`
	ResolvedAt *time.Time           `json:"resolved_at"`
}
