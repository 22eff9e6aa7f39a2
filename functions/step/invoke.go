package step

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// Invoke returns the wait called name for a child run of this run: function (a
// function registered in this run's tenant, at its current revision) run with input,
// encoded as JSON. Its [Future.Get] returns the child's output decoded into T. The child
// runs as this run's identity, which the function's invoke_roles must allow unless it
// is an admin. Making the future takes no seq and starts nothing: Get starts the child,
// or [WaitAll] starts it with the other child runs it is given, at once.
//
// Get suspends the run the first time: the gateway starts the child and, when the child
// ends, journals its outcome at the wait's seq and invokes the function again at once.
// There, and on every later replay, Get returns the journaled outcome without starting
// anything: the child's output, or an [*Error] whose Type is the child's error type when
// it failed ("cancelled" when it was cancelled), [ErrorTypeNotFound] when the function
// is not registered, or [ErrorTypeForbidden] when its invoke_roles exclude this run's
// identity. The function may handle the error and go on; returned as is, it fails the
// run. A child run cannot be one of [WaitFirst]'s futures: the gateway waits for the
// first of events, messages and callbacks only.
//
// Cancelling this run cancels the child too (and its children), unless the child was
// started with the option [Detached]: a detached child runs to its end, and its outcome
// is not journaled in the cancelled run. The child inherits this run's deadline (the
// gateway's ?timeout= or run_timeout), unless it is detached: a detached child outlives
// this run, bounded only by its own function's run_timeout.
//
// Invoke takes the option [Detached]. name must be 1 to 255 bytes, function a valid
// function name (letters, digits, '.', '_', '-', at most 255), and input must encode as
// JSON; otherwise, as for an option it does not take, Get returns a non-retryable error
// without taking a seq.
func Invoke[T any](ctx context.Context, name, function string, input any, opts ...Option) *Future[T] {
	p, bad := optionsFor("Invoke", opts, "Detached")
	if err := names.CheckFunction("function", function); err != nil && bad == nil {
		bad = NonRetryable(fmt.Errorf("step: invoke %q: %w", name, err))
	}
	raw, err := json.Marshal(input)
	if err != nil && bad == nil {
		bad = NonRetryable(fmt.Errorf("step: invoke %q: encode input: %w", name, err))
	}
	w := wait{
		kind: protocol.EntryKindInvoke, name: name,
		await: protocol.Await{Type: protocol.AwaitTypeInvoke, Function: &function, Input: (*protocol.AnyJSON)(&raw)},
	}
	if p.detached {
		w.await.Detached = new(true)
	}
	return newWait(ctx, w, replay[T], bad)
}

// MaxInvokeAll is how many child runs [WaitAll] starts at once, in one await of the
// gateway (an invoke_all); more are started in groups of that many, one after another.
const MaxInvokeAll = 64

// invokeAll starts the child runs of children (1 to MaxInvokeAll, none resolved) at once,
// at the next len(children) seqs, each journaled as an invoke entry named after the
// first (the gateway names them all alike), and resolves them once all have ended.
func invokeAll(children []*future) error {
	name := children[0].wait.name
	calls := make([]protocol.InvokeCall, len(children))
	for i, c := range children {
		aw := c.wait.await
		calls[i] = protocol.InvokeCall{Function: *aw.Function, Input: aw.Input, Detached: aw.Detached}
	}
	st, first, entries, err := take(children[0].ctx, protocol.EntryKindInvoke, name, len(children), true)
	if err != nil {
		return err
	}
	journaled := 0
	for _, e := range entries {
		if e != nil {
			journaled++
		}
	}
	switch journaled {
	case 0:
		return st.Halt(invocation.Suspended(&protocol.Await{
			Type: protocol.AwaitTypeInvokeAll, Seq: first, Name: name, Calls: &calls,
		}))
	case len(children):
	default:
		// The gateway calls the run again only once every child is journaled.
		return st.Halt(invocation.Retry("replay", fmt.Sprintf(
			"invoke_all %q: %d of the %d children at seqs %d to %d are journaled; the run is called again once all are",
			name, journaled, len(children), first, first+len(children)-1)))
	}
	for i, e := range entries {
		_ = children[i].settle(st, e) // each future's Get returns its own outcome
	}
	return nil
}
