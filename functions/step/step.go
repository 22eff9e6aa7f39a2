package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// ErrNoInvocation is returned by steps called with a context that does not come from an
// invocation.
var ErrNoInvocation = errors.New("step: context does not belong to an invocation")

// ErrStopped is returned by a step called from a goroutine other than the function's
// once the invocation has stopped. The invocation's answer is already decided; the
// goroutine should return.
var ErrStopped = invocation.ErrStopped

// ErrTimedOut is what a wait's error is (errors.Is) when its timeout passed before what
// it waits for came: a [Timeout] option's, or a callback's expiry. Like an [*Error], it
// counts as non-retryable: returned as is, it fails the run.
var ErrTimedOut = errors.New("step: timed out")

// ErrNested is returned, as a non-retryable error, by a step started inside another
// step's function.
var ErrNested = invocation.ErrNested

// DefaultMaxAttempts is how many attempts a step makes, the first included, unless
// [MaxAttempts] says otherwise.
const DefaultMaxAttempts = 3

// Error types of a step's final failure, in [Error].Type and in the journal.
const (
	ErrorTypeFailed       = "step_failed"   // the last attempt failed
	ErrorTypeNonRetryable = "non_retryable" // an attempt failed with a NonRetryable error
)

// Error types of an [Invoke] whose child run did not start. A child run that failed or
// was cancelled has its own error's type ("cancelled" for a cancellation).
const (
	ErrorTypeNotFound  = "not_found" // the function is not registered in the run's tenant
	ErrorTypeForbidden = "forbidden" // its invoke_roles exclude the run's identity (for a send: the target's, and its resume_roles)
)

// Error is the final failure of a step, returned by [Run] both when the last attempt
// fails and when the failure is replayed from the journal, and by [Invoke] for a child
// run that failed, was cancelled or could not start. Only the journaled fields
// survive a replay, so Error never wraps the original error: branch on Type or Message,
// not on errors.Is with the function's own errors. It counts as non-retryable: a function
// that returns it (wrapped or not) fails its run.
type Error struct {
	Seq     int    // The step's seq in the run.
	Name    string // The step's name.
	Type    string // ErrorTypeFailed or ErrorTypeNonRetryable, or what the journal holds.
	Message string // The message of the error the step's function returned.
}

// Error returns the journaled message.
func (e *Error) Error() string { return e.Message }

// NonRetryable marks err as permanent. Returned by a step's function, it fails the step
// at once, whatever attempts are left; returned by a function, it fails the run without
// retries. NonRetryable(nil) is nil. The result's message is err's, and it unwraps to err.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryable{err}
}

// IsNonRetryable reports whether err is, or wraps, an error made by [NonRetryable] or an
// [*Error].
func IsNonRetryable(err error) bool {
	var nr *nonRetryable
	var se *Error
	return errors.As(err, &nr) || errors.As(err, &se)
}

type nonRetryable struct{ err error }

func (e *nonRetryable) Error() string { return e.err.Error() }
func (e *nonRetryable) Unwrap() error { return e.err }

// Run runs the step called name: it returns the journaled outcome if the step already
// finished, and otherwise calls fn and journals its outcome before returning it.
//
// When fn succeeds, its output is journaled (the gateway has acknowledged the
// checkpoint) before Run returns it, so once code after the step has seen the output,
// fn never runs again: an invocation lost after that replays the output. An invocation
// lost while fn runs, or before its checkpoint is acknowledged, runs the step again on
// its retry (side effects inside a step happen at least once). With [Lazy] (or the
// function's LazyCheckpoints) the output is journaled later, with what follows it. When
// fn fails (or panics) and the step has attempts left, the invocation suspends and the
// gateway retries the step later, in a new invocation. When the last attempt fails, or
// fn returns a [NonRetryable] error, the failure is journaled and returned as an
// [*Error]; the function may handle it and go on. fn is never called again once its
// step is journaled.
//
// Run takes the options [MaxAttempts], [Backoff] and [Lazy]. name must be 1 to 255
// bytes; otherwise Run returns a non-retryable error without taking a seq, as it does for
// an option it does not take. It returns [ErrNoInvocation] when ctx is not an invocation's.
func Run[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error), opts ...Option) (T, error) {
	var zero T
	p, err := optionsFor("Run", opts, "MaxAttempts", "Backoff", "Lazy")
	if err != nil {
		return zero, err
	}
	st, seq, e, err := next(ctx, protocol.EntryKindStep, name)
	if err != nil {
		return zero, err
	}
	if e != nil {
		return replay[T](st, e)
	}

	if err := st.Err(); err != nil {
		// The gateway gave up on this invocation: start no more side effects.
		return zero, st.Halt(invocation.Retry("canceled", fmt.Sprintf("step %d %q: %v", seq, name, err)))
	}
	// A captured request sent again to a process that never saw it passes the signature
	// check: before any step function runs, the gateway says whether this invocation
	// still owns the run, claimed for this process and no other.
	if err := st.CheckOwner(); err != nil {
		return zero, err
	}
	attempt := st.Attempt(seq)
	started := time.Now().UTC()
	out, err := call(ctx, st, attempt, fn)
	entry, stop := finishedEntry(seq, name, attempt, started, out, err)
	if stop != nil {
		return zero, st.Halt(stop)
	}

	if err == nil {
		journal := st.Checkpoint
		if p.lazy || st.Lazy() {
			journal = st.Defer
		}
		if err := journal(&entry); err != nil {
			return zero, err
		}
		return out, nil
	}

	retry, final := p.failure(seq, name, attempt, err)
	if retry != nil {
		return zero, st.Halt(invocation.Suspended(retry))
	}
	entry.Error = final
	if err := st.Checkpoint(&entry); err != nil {
		return zero, err
	}
	return zero, &Error{Seq: seq, Name: name, Type: final.Type, Message: final.Message}
}

// finishedEntry is the journal entry of attempt of the step at seq, begun at started,
// whose function returned out and err: with its output when err is nil, or a Stop when
// that output does not encode as JSON.
func finishedEntry[T any](seq int, name string, attempt int, started time.Time, out T, err error) (protocol.JournalEntry, *invocation.Stop) {
	finished := time.Now().UTC()
	entry := protocol.JournalEntry{
		Seq: seq, Kind: protocol.EntryKindStep, Name: name,
		Attempt: &attempt, StartedAt: &started, FinishedAt: &finished,
	}
	if err == nil {
		raw, err := json.Marshal(out)
		if err != nil {
			return entry, invocation.Failed("output", fmt.Sprintf("step %d %q: encode output: %v", seq, name, err))
		}
		entry.Output = (*protocol.AnyJSON)(&raw)
	}
	return entry, nil
}

// Attempt returns the attempt (1 for the first) of the step whose function is running
// with ctx, or 0 outside a step's function.
func Attempt(ctx context.Context) int {
	if _, attempt := invocation.StepOf(ctx); attempt > 0 {
		return attempt
	}
	if st := invocation.From(ctx); st != nil {
		return st.Current()
	}
	return 0
}

func next(ctx context.Context, kind protocol.EntryKind, name string) (*invocation.State, int, *protocol.JournalEntry, error) {
	return takeOne(ctx, kind, name, false)
}

// nextAwait is next for an entry whose fresh path suspends the run at once: the step
// held for the answer rides in the suspended answer (invocation.State.NextAwaitN).
func nextAwait(ctx context.Context, kind protocol.EntryKind, name string) (*invocation.State, int, *protocol.JournalEntry, error) {
	return takeOne(ctx, kind, name, true)
}

// takeOne is take of one seq.
func takeOne(ctx context.Context, kind protocol.EntryKind, name string, await bool) (*invocation.State, int, *protocol.JournalEntry, error) {
	st, seq, es, err := take(ctx, kind, name, 1, await)
	if err != nil {
		return st, 0, nil, err
	}
	return st, seq, es[0], nil
}

// take takes the next n seqs for entries of kind named name (invocation.State.NextN,
// or with await the NextAwaitN of entries that suspend the run), after the checks every
// step makes: an invocation's context, a valid name, not inside a parallel step's
// function.
func take(ctx context.Context, kind protocol.EntryKind, name string, n int, await bool) (*invocation.State, int, []*protocol.JournalEntry, error) {
	st := invocation.From(ctx)
	if st == nil {
		return nil, 0, nil, ErrNoInvocation
	}
	if err := names.Check("step name", name); err != nil {
		return nil, 0, nil, NonRetryable(fmt.Errorf("step: %w", err))
	}
	if seq, _ := invocation.StepOf(ctx); seq > 0 {
		return nil, 0, nil, NonRetryable(fmt.Errorf("step %q, inside the function of parallel step %d: %w", name, seq, ErrNested))
	}
	nextN := st.NextN
	if await {
		nextN = st.NextAwaitN
	}
	seq, es, err := nextN(kind, name, n)
	if errors.Is(err, ErrNested) {
		err = NonRetryable(err)
	}
	return st, seq, es, err
}

func replay[T any](st *invocation.State, e *protocol.JournalEntry) (T, error) {
	var out T
	if e.Error != nil {
		return out, &Error{Seq: e.Seq, Name: e.Name, Type: e.Error.Type, Message: e.Error.Message}
	}
	if e.Output != nil && len(*e.Output) > 0 {
		if err := json.Unmarshal(*e.Output, &out); err != nil {
			// The step happened, but this code cannot read its outcome: going on would
			// take another path than the one journaled. A fixed deploy can resume it.
			return out, st.Halt(invocation.Retry("replay", fmt.Sprintf("step %d %q: decode journaled output into %T: %v", e.Seq, e.Name, out, err)))
		}
	}
	return out, nil
}

// suspend halts the invocation, answering that the run waits on aw for timeout (0:
// the gateway's default).
func suspend(st *invocation.State, aw *protocol.Await, timeout time.Duration) error {
	if timeout > 0 {
		aw.Timeout = new(timeout.String())
	}
	return st.Halt(invocation.Suspended(aw))
}

// decodeJournaled decodes raw, journaled data of the entry at seq (what names it), into
// v; data this code cannot read halts the invocation (retried), as a step's output that
// does not decode does: a fixed deploy can resume it.
func decodeJournaled(st *invocation.State, what string, seq int, name string, raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return st.Halt(invocation.Retry("replay", fmt.Sprintf("%s %d %q: decode data into %T: %v", what, seq, name, v, err)))
	}
	return nil
}

// call runs a step's function, turning a panic into an error.
func call[T any](ctx context.Context, st *invocation.State, attempt int, fn func(context.Context) (T, error)) (out T, err error) {
	st.Enter(attempt)
	defer func() {
		st.Leave()
		if v := recover(); v != nil {
			if _, ok := v.(*invocation.Stop); ok {
				panic(v) // the invocation is unwinding; not the step's failure
			}
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return fn(ctx)
}
