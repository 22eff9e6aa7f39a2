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

// Resolvers of a callback, in [CallbackResult].Resolver.
const (
	ResolverToken    = "token"    // whoever held the callback's URL (no identity)
	ResolverIdentity = "identity" // a caller with a JWT and runs:manage, by run id and name
)

// CallbackHandle is a callback a run made with [Callback]: hand its URL to whoever must
// resolve it, and wait for it with [AwaitCallback].
type CallbackHandle struct {
	Seq  int    // The callback's seq in the run.
	Name string // The callback's name.
	// URL resolves the callback: POST it a JSON body (the data), or POST URL+"/reject"
	// an error {"type"?, "message"}. It needs no other credential: treat it as a secret.
	URL string
	// Token is the last segment of URL: 256 random bits made by the gateway, the
	// credential for this callback alone.
	Token string
	// ExpiresAt is when the callback stops taking a resolution, unless an
	// [AwaitCallback] sets another end (database clock).
	ExpiresAt time.Time
}

// CallbackOption configures a [Callback].
type CallbackOption struct{ timeout time.Duration }

// CallbackTimeout sets how long the callback stays open until an [AwaitCallback] sets
// its own end: from 1s to 8760h. Defaults to 168h (7 days).
func CallbackTimeout(d time.Duration) CallbackOption { return CallbackOption{timeout: d} }

// Callback makes a callback called name, as the run's next entry: the gateway makes an
// unguessable token for it and its URL, and journals them, so that a replay returns the
// same handle and no second callback is made. Hand the URL to the outside world in a
// later step (an email, a chat message, a payment provider's webhook setting), then
// wait for it with [AwaitCallback]. A resolution that comes before the run awaits the
// callback is kept, and the await returns it at once.
//
// name must be 1 to 255 bytes; otherwise it returns a non-retryable error without
// taking a seq. It returns [ErrNoInvocation] when ctx is not an invocation's.
func Callback(ctx context.Context, name string, opts ...CallbackOption) (CallbackHandle, error) {
	st, seq, e, err := next(ctx, protocol.EntryKindCallback, name)
	if err != nil {
		return CallbackHandle{}, err
	}
	var out json.RawMessage
	if e != nil {
		if e.Output != nil {
			out = json.RawMessage(*e.Output)
		}
	} else {
		if err := st.Err(); err != nil {
			return CallbackHandle{}, st.Halt(invocation.Retry("canceled", fmt.Sprintf("callback %d %q: %v", seq, name, err)))
		}
		now := time.Now().UTC()
		entry := &protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindCallback, Name: name, StartedAt: &now, FinishedAt: &now}
		for _, o := range opts {
			if o.timeout > 0 {
				raw, _ := json.Marshal(map[string]string{"timeout": o.timeout.String()})
				entry.Output = (*protocol.AnyJSON)(&raw)
			}
		}
		ack, err := st.CheckpointAck(entry)
		if err != nil {
			return CallbackHandle{}, err
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
		return CallbackHandle{}, st.Halt(invocation.Retry("callback", fmt.Sprintf(
			"callback %d %q: the gateway gave no token (output %s)", seq, name, out)))
	}
	return CallbackHandle{Seq: seq, Name: name, URL: got.URL, Token: got.Token, ExpiresAt: got.ExpiresAt}, nil
}

// CallbackResult is the outcome of [AwaitCallback]: the data the callback was resolved
// with, or TimedOut when its timeout passed first. A rejection is AwaitCallback's error.
type CallbackResult[T any] struct {
	Data     T
	TimedOut bool
	// Resolver says who resolved or rejected it: ResolverToken or ResolverIdentity;
	// ResolvedBy is the caller's identity for ResolverIdentity, else nil.
	Resolver   string
	ResolvedBy *invocation.Identity // A *functions.Identity.
	ResolvedAt time.Time            // Database clock.
}

// AwaitCallback suspends the run until cb is resolved or rejected, or timeout passes
// (from 1s to 8760h; 0 keeps the callback's own expiry), and returns which. The end of
// the wait becomes the callback's expiry: a resolution after it is refused (409).
// Nothing of the run lives in memory while it waits.
//
// The resolution is journaled at this await's seq, with who resolved it, so a replay
// returns it without waiting; a callback resolved before the run got here returns at
// once. A rejection returns an [*Error] whose Type is the rejection's
// ([ErrorTypeRejected] unless it named one) and whose Message is its message, with the
// result's Resolver fields set: the function may handle it and go on, and returning it
// fails the run. Journaled data that does not decode into T halts the invocation
// (retried), as a step's output would.
//
// It returns [ErrNoInvocation] when ctx is not an invocation's. Awaiting a callback
// made by another run is impossible: the gateway fails the run (bad_answer) when cb is
// not one of its callbacks.
func AwaitCallback[T any](ctx context.Context, cb CallbackHandle, timeout time.Duration) (CallbackResult[T], error) {
	var out CallbackResult[T]
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindAwaitCallback, cb.Name)
	if err != nil {
		return out, err
	}
	if e == nil {
		aw := &protocol.Await{Type: protocol.AwaitTypeAwaitCallback, Seq: seq, Name: cb.Name, CallbackSeq: &cb.Seq}
		return out, suspend(st, aw, timeout)
	}
	return callbackFrom[T](st, e)
}

// callbackFrom reads a journaled await_callback entry (or a wait_any's, unwrapped).
func callbackFrom[T any](st *invocation.State, e *protocol.JournalEntry) (CallbackResult[T], error) {
	var out CallbackResult[T]
	seq, name := e.Seq, e.Name
	got, err := replay[callbackEntry](st, e)
	if err != nil {
		return out, err
	}
	if got.TimedOut {
		out.TimedOut = true
		return out, nil
	}
	out.Resolver, out.ResolvedBy = got.Resolver, got.ResolvedBy
	if got.ResolvedAt != nil {
		out.ResolvedAt = *got.ResolvedAt
	}
	if got.Error != nil {
		return out, &Error{Seq: seq, Name: name, Type: got.Error.Type, Message: got.Error.Message}
	}
	return out, decodeJournaled(st, "callback", seq, name, got.Data, &out.Data)
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
