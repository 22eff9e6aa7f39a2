package step

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Future is a step started by [Go]: its outcome once it has finished.
type Future[T any] struct {
	st    *invocation.State
	seq   int
	done  chan struct{}
	out   T
	err   error
	retry *protocol.Await // a failed attempt with attempts left: Get suspends with it
}

// Seq returns the step's seq in the run (0 when Go returned an error).
func (f *Future[T]) Seq() int { return f.seq }

// Go starts the step called name, as [Run] does, but runs fn in its own goroutine and
// returns at once: several steps started with Go run at the same time, within one
// invocation. Each takes its seq when Go is called, so a replay finds every step at the
// seq it had whatever order they finished in; each is checkpointed as soon as it
// finishes (with a window: see the protocol's JournalEntry), so a step that fails does
// not lose the others that finished.
//
// A step already journaled is not run again: its future holds the journaled outcome.
// [Future.Get] and [All] return the outcomes. A step that fails with attempts left is
// not journaled: Get (or All, once every step given to it has finished) suspends the
// run for its retry, which runs it again in a later invocation with the next attempt;
// the finished ones are replayed then. The invocation's answer waits for every step
// started with Go to finish, so fn must honour its context: it is cancelled when the
// invocation stops early.
//
// fn must not start steps: they would take seqs in whatever order the goroutines run.
// A step called with fn's context returns [ErrNested]. At most 64 steps run in parallel
// beyond the lowest that has not finished: Go, and any step after it, waits for room.
func Go[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error), opts ...Option) *Future[T] {
	f := &Future[T]{done: make(chan struct{})}
	st, seq, e, err := next(ctx, protocol.EntryKindStep, name)
	f.st, f.seq = st, seq
	switch {
	case err != nil:
		f.err = err
	case e != nil:
		f.out, f.err = replay[T](st, e)
	case st.Err() != nil:
		// The gateway gave up on this invocation: start no more side effects.
		f.err = st.Halt(invocation.Retry("canceled", fmt.Sprintf("step %d %q: %v", seq, name, st.Err())))
	}
	if err == nil && e == nil && f.err == nil {
		// No step function runs before the gateway says this invocation owns the run
		// (see Run).
		f.err = st.CheckOwner()
	}
	if err != nil || e != nil || f.err != nil {
		close(f.done)
		return f
	}
	p := newPolicy(opts)
	attempt := st.Attempt(seq)
	st.GoStart(seq)
	go func() {
		defer close(f.done)
		journaled := false
		defer func() { st.GoDone(seq, journaled, f.retry) }()
		started := time.Now().UTC()
		out, err := callParallel(invocation.InStep(ctx, seq, attempt), fn)
		entry, stop := finishedEntry(seq, name, attempt, started, out, err)
		if stop != nil {
			f.err = st.Halt(stop)
			return
		}
		if err == nil {
			if f.err = st.Checkpoint(&entry); f.err == nil {
				f.out, journaled = out, true
			}
			return
		}
		if st.Stopped() != nil {
			// It failed because the invocation stopped (its context was cancelled):
			// not the step's outcome. A later invocation runs it again.
			f.err = ErrStopped
			return
		}
		retry, final := p.failure(seq, name, attempt, err)
		if retry != nil {
			f.retry, f.err = retry, err
			return
		}
		entry.Error = final
		if f.err = st.Checkpoint(&entry); f.err == nil {
			f.err, journaled = &Error{Seq: seq, Name: name, Type: final.Type, Message: final.Message}, true
		}
	}()
	return f
}

// Get waits for the step to finish and returns its outcome, as [Run] would: its output,
// or an [*Error] for its final failure. A failure with attempts left suspends the run
// for the step's retry, and an invocation that stopped meanwhile unwinds, as a step
// does: Get does not return then (from another goroutine than the function's, it
// returns [ErrStopped]).
func (f *Future[T]) Get() (T, error) {
	<-f.done
	var zero T
	switch {
	case f.retry != nil:
		return zero, f.st.Halt(invocation.Suspended(f.retry))
	case errors.Is(f.err, ErrStopped):
		return zero, f.st.Halt(nil)
	}
	return f.out, f.err
}

// All waits for every future to finish, then returns their outputs, in order, and the
// first error among them (an [*Error] of a step's final failure), with the outputs of
// the others. When one of them failed with attempts left, the run suspends for its retry
// (the lowest such seq) once all have finished, so the others are journaled first.
func All[T any](futures ...*Future[T]) ([]T, error) {
	for _, f := range futures {
		<-f.done
	}
	out := make([]T, len(futures))
	var first error
	for i, f := range futures {
		v, err := f.Get()
		if err != nil && first == nil {
			first = err
		}
		out[i] = v
	}
	return out, first
}

// callParallel runs a parallel step's function, turning a panic into an error.
func callParallel[T any](ctx context.Context, fn func(context.Context) (T, error)) (out T, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return fn(ctx)
}
