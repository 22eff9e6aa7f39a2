package step

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/functions/names"
	"github.com/stepgate/stepgate/protocol"
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
// journaled in the cancelled run.
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
	st, seq, e, err := next(ctx, protocol.EntryKindInvoke, name)
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

// Detached starts the child run detached: cancelling this run does not cancel it.
func Detached() InvokeOption { return InvokeOption{detached: true} }
