package step

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Go starts the step called name, as [Run] does, but runs fn in its own goroutine and
// returns at once: several steps started with Go run at the same time, within one
// invocation. Each takes its seq when Go is called, so a replay finds every step at the
// seq it had whatever order they finished in; each is checkpointed as soon as it
// finishes (with a window: see the protocol's JournalEntry), so a step that fails does
// not lose the others that finished.
//
// A step already journaled is not run again: its future holds the journaled outcome.
// [Future.Get], [WaitAll] and [All] return the outcomes; [WaitFirst] says which of
// several finished first. A step that fails with attempts left is not journaled: Get
// (or WaitAll and All, once every step given to them has finished) suspends the run for
// its retry, which runs it again in a later invocation with the next attempt; the
// finished ones are replayed then. The invocation's answer waits for every step started
// with Go to finish, so fn must honour its context: it is cancelled when the invocation
// stops early.
//
// Go takes the options [MaxAttempts] and [Backoff]; given another, or a bad name, its
// future's Get returns a non-retryable error and no seq is taken.
//
// fn must not start steps: they would take seqs in whatever order the goroutines run.
// A step called with fn's context returns [ErrNested]. At most 64 steps run in parallel
// beyond the lowest that has not finished: Go, and any step after it, waits for room.
func Go[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error), opts ...Option) *Future[T] {
	fut := &Future[T]{f: future{ctx: ctx, done: make(chan struct{})}}
	f := &fut.f
	p, err := optionsFor("Go", opts, "MaxAttempts", "Backoff")
	if err != nil {
		f.bad = err
		close(f.done)
		return fut
	}
	st, seq, e, err := next(ctx, protocol.EntryKindStep, name)
	f.st, f.seq = st, seq
	switch {
	case err != nil:
		f.err = err
	case e != nil:
		fut.out, f.err = replay[T](st, e)
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
		return fut
	}
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
				fut.out, journaled = out, true
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
	return fut
}

// All waits for every future as [WaitAll] does, then returns their values, in order,
// and the first error among them in that order, with the values of the others. It
// takes the seqs WaitAll takes: it is WaitAll for futures of one T.
func All[T any](futures ...*Future[T]) ([]T, error) {
	ws := make([]Waitable, len(futures))
	for i, f := range futures {
		ws[i] = f
	}
	first := waitAll(ws)
	out := make([]T, len(futures))
	for i, f := range futures {
		if f != nil && f.f.isDone() {
			out[i] = f.out
		}
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
