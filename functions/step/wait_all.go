package step

import (
	"context"
	"fmt"

	"github.com/stepgate/stepgate/functions/internal/invocation"
)

// WaitAll waits for every future, of any T, then returns the first error among their
// outcomes in the order given (nil when all succeeded); each future's [Future.Get]
// returns its own outcome then, without waiting.
//
// It waits in this order, whatever the order given: first the steps started with [Go]
// (all of them finished: one that failed with attempts left suspends the run for its
// retry then, the first such in the order given, as its Get would); then it starts every child run
// ([Invoke]) among the futures at once, in one await of the gateway, at the next seqs
// in the order given, journaled under the first one's name (the gateway names them all
// alike), and the run is called again once all have ended (at most [MaxInvokeAll] at
// once: more start in groups of that many); then the other waits one after another in
// the order given, each as its Get (taking one seq). Futures already resolved are not
// waited for again. A future that is nil is a non-retryable error, before any wait.
//
// It returns [ErrNoInvocation] when ctx is not an invocation's.
func WaitAll(ctx context.Context, futures ...Waitable) error {
	if err := checkWaiter(ctx, "WaitAll"); err != nil {
		return err
	}
	return waitAll(futures)
}

// waitAll is WaitAll.
func waitAll(ws []Waitable) error {
	fs, err := futuresOf("WaitAll", ws)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if f.done != nil {
			<-f.done
		}
	}
	var children []*future
	for _, f := range fs {
		if f.done != nil {
			_ = resolve(f) // a retry suspends the run; other outcomes are returned below
		} else if f.isChild() && !f.isDone() {
			children = append(children, f)
		}
	}
	switch {
	case len(children) == 1:
		_ = resolve(children[0])
	case len(children) > 1:
		for start := 0; start < len(children); start += MaxInvokeAll {
			if err := invokeAll(children[start:min(start+MaxInvokeAll, len(children))]); err != nil {
				return err
			}
		}
	}
	var first error
	for _, f := range fs {
		if err := resolve(f); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// checkWaiter checks, before anything is waited for, that ctx is an invocation's and
// not a step function's: what takes a seq is called from the function's goroutine.
func checkWaiter(ctx context.Context, what string) error {
	if ctx == nil || invocation.From(ctx) == nil {
		return ErrNoInvocation
	}
	if seq, _ := invocation.StepOf(ctx); seq > 0 {
		return NonRetryable(fmt.Errorf("step: %s, inside the function of parallel step %d: %w", what, seq, ErrNested))
	}
	return nil
}
