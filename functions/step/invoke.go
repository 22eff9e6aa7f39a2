package step

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// Invoke runs function (a function registered in this run's tenant, at its current
// revision) with input, encoded as JSON, as a child run of this run, and returns the
// child's output decoded into T. The child runs as this run's identity, which the
// function's invoke_roles must allow unless it is an admin.
//
// The first time, Invoke suspends the run: the gateway starts the child and, when the
// child ends, journals its outcome at this step's seq and invokes the function again at
// once. There, and on every later replay, Invoke returns the journaled outcome without
// starting anything: the child's output, or an [*Error] whose Type is the child's error
// type when it failed ("cancelled" when it was cancelled), [ErrorTypeNotFound] when the
// function is not registered, or [ErrorTypeForbidden] when its invoke_roles exclude
// this run's identity. The function may handle the error and go on; returned as is, it
// fails the run.
//
// Cancelling this run cancels the child too (and its children), unless the child was
// started with [Detached]: a detached child runs to its end, and its outcome is not
// journaled in the cancelled run. The child inherits this run's deadline (the gateway's
// ?timeout= or run_timeout), unless it is detached: a detached child outlives this run,
// bounded only by its own function's run_timeout.
//
// name must be 1 to 255 bytes, function a valid function name (letters, digits, '.',
// '_', '-', at most 255), and input must encode as JSON; otherwise Invoke returns a
// non-retryable error without taking a seq. It returns [ErrNoInvocation] when ctx is
// not an invocation's.
func Invoke[T any](ctx context.Context, name, function string, input any, opts ...InvokeOption) (T, error) {
	var zero T
	if err := names.CheckFunction("function", function); err != nil {
		return zero, NonRetryable(fmt.Errorf("step: invoke %q: %w", name, err))
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return zero, NonRetryable(fmt.Errorf("step: invoke %q: encode input: %w", name, err))
	}
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindInvoke, name)
	if err != nil {
		return zero, err
	}
	if e != nil {
		return replay[T](st, e)
	}
	w := &protocol.Await{
		Type: protocol.AwaitTypeInvoke, Seq: seq, Name: name, Function: &function, Input: (*protocol.AnyJSON)(&raw),
	}
	for _, o := range opts {
		if o.detached {
			w.Detached = &o.detached
		}
	}
	return zero, st.Halt(invocation.Suspended(w))
}

// InvokeOption configures an [Invoke].
type InvokeOption struct{ detached bool }

// Detached starts the child run detached: cancelling this run does not cancel it, and
// it does not inherit this run's deadline.
func Detached() InvokeOption { return InvokeOption{detached: true} }

// Call is one child run of [InvokeAll]: a function of this run's tenant and its input
// (encoded as JSON).
type Call struct {
	Function string
	Input    any
	Detached bool // As [Detached]: this child is not cancelled with this run, nor bound by its deadline.
}

// Outcome is one child run's outcome in [InvokeAll]: its output decoded into T, or its
// error, as [Invoke] returns them.
type Outcome[T any] struct {
	Output T
	Err    error
}

// MaxInvokeAll is how many child runs one [InvokeAll] may start.
const MaxInvokeAll = 64

// InvokeAll runs several functions at once as child runs of this run, as [Invoke] runs
// one, and returns their outcomes in the order of calls once all of them have ended.
// The children take the next len(calls) seqs, each journaled as an invoke entry named
// name when its child ends; the run is suspended until the last of them has ended, and
// called once more then (not once per child).
//
// name must be 1 to 255 bytes, calls 1 to [MaxInvokeAll] with valid function names and
// inputs that encode as JSON; otherwise InvokeAll returns a non-retryable error without
// taking a seq.
func InvokeAll[T any](ctx context.Context, name string, calls ...Call) ([]Outcome[T], error) {
	if len(calls) == 0 || len(calls) > MaxInvokeAll {
		return nil, NonRetryable(fmt.Errorf("step: invoke_all %q: %d calls, not from 1 to %d", name, len(calls), MaxInvokeAll))
	}
	wire := make([]protocol.InvokeCall, len(calls))
	for i, c := range calls {
		if err := names.CheckFunction("function", c.Function); err != nil {
			return nil, NonRetryable(fmt.Errorf("step: invoke_all %q: calls[%d]: %w", name, i, err))
		}
		raw, err := json.Marshal(c.Input)
		if err != nil {
			return nil, NonRetryable(fmt.Errorf("step: invoke_all %q: calls[%d]: encode input: %w", name, i, err))
		}
		wire[i] = protocol.InvokeCall{Function: c.Function, Input: (*protocol.AnyJSON)(&raw)}
		if c.Detached {
			wire[i].Detached = new(true)
		}
	}
	st, first, entries, err := take(ctx, protocol.EntryKindInvoke, name, len(calls), true)
	if err != nil {
		return nil, err
	}
	journaled := 0
	for _, e := range entries {
		if e != nil {
			journaled++
		}
	}
	switch journaled {
	case 0:
		return nil, st.Halt(invocation.Suspended(&protocol.Await{
			Type: protocol.AwaitTypeInvokeAll, Seq: first, Name: name, Calls: &wire,
		}))
	case len(calls):
	default:
		// The gateway calls the run again only once every child is journaled.
		return nil, st.Halt(invocation.Retry("replay", fmt.Sprintf(
			"invoke_all %q: %d of the %d children at seqs %d to %d are journaled; the run is called again once all are",
			name, journaled, len(calls), first, first+len(calls)-1)))
	}
	out := make([]Outcome[T], len(calls))
	for i, e := range entries {
		out[i].Output, out[i].Err = replay[T](st, e)
	}
	return out, nil
}
