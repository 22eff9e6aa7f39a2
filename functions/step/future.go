package step

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// Future is the one shape of everything a run waits for: a step started with [Go], a
// timer ([After], [At]), an event ([WaitForEvent]), a message ([Receive]), a callback's
// result ([OpenCallback.Result]) or a child run ([Invoke]). [Future.Get] waits for it
// alone; [WaitFirst] and [WaitAll] wait for several, of any T.
//
// A wait the gateway keeps (all but [Go]'s steps) is lazy: making its future takes no
// seq and waits for nothing. Get takes the next seq of the run then, and waits as a
// blocking call would (the run suspends until it comes); a future already resolved (by
// an earlier Get, [WaitFirst] or [WaitAll]) returns its outcome again, taking no seq.
// Its Get must be called from the function's goroutine, as steps are.
type Future[T any] struct {
	f   future
	out T
}

// Waitable is what [WaitFirst] and [WaitAll] take: any [*Future], whatever its T.
type Waitable interface {
	waitable() *future
}

func (f *Future[T]) waitable() *future {
	if f == nil {
		return nil
	}
	return &f.f
}

// future is the part of a Future that does not depend on T.
type future struct {
	ctx context.Context
	st  *invocation.State
	seq int
	// bad is the error the future was made with (a bad name, an option its function
	// does not take): Get returns it, and nothing is waited for.
	bad error

	// A parallel step (Go): done is closed when it has finished.
	done  chan struct{}
	retry *protocol.Await // a failed attempt with attempts left: Get suspends with it

	// A wait the gateway keeps:
	wait     *wait
	resolved bool
	err      error // its outcome's error, once resolved
}

// wait describes a wait the gateway keeps. A new kind of wait is one file: a
// constructor that fills a wait (its entry's kind and name, its protocol await, a decode
// of its journal entry) and returns newWait's future. Get then takes the seq and
// suspends with the await, or decodes the journaled entry; WaitFirst offers the await
// as one of a wait_any's alternatives (the gateway says which kinds it takes there),
// and decodes the entry a wait_any journals for it.
type wait struct {
	kind  protocol.EntryKind // of its journal entry
	name  string             // of its journal entry
	await protocol.Await     // its Type and its kind's fields; Seq and Name are set when it is waited for
	// timeout is its Timeout option (0: the gateway's default).
	timeout time.Duration
	// decode reads its journal entry (or a wait_any's, unwrapped) into the future's
	// value, and returns the outcome's error.
	decode func(st *invocation.State, e *protocol.JournalEntry) error
	// timer, for a timer, says how long is left until it passes (its Get sleeps that
	// long); [WaitFirst] tells a timer by it, and reads its deadline from the await
	// (duration or until).
	timer func() time.Duration
	// get, when set, waits for it alone instead of the plain await (a timer may be
	// waited out in the process); it returns nil once it has come.
	get func(ctx context.Context, w *wait) error
}

// newWait returns the future of w, whose journal entry decode reads into a T; a
// non-nil bad is the future's error, returned by Get without waiting.
func newWait[T any](ctx context.Context, w wait, decode func(st *invocation.State, e *protocol.JournalEntry) (T, error), bad error) *Future[T] {
	fut := &Future[T]{f: future{ctx: ctx, bad: bad}}
	if bad == nil {
		if err := names.Check("step name", w.name); err != nil {
			fut.f.bad = NonRetryable(fmt.Errorf("step: %w", err))
		}
	}
	w.decode = func(st *invocation.State, e *protocol.JournalEntry) error {
		out, err := decode(st, e)
		fut.out = out
		return err
	}
	fut.f.wait = &w
	return fut
}

// Seq returns the future's seq in the run: a step's, taken by [Go]; for a wait, the seq
// of the entry it was resolved from (a [WaitFirst]'s when it chose it), or 0 until then
// (and for a timer waited for alone, whose Get reports none).
func (f *Future[T]) Seq() int { return f.f.seq }

// Get waits for the future alone and returns its outcome.
//
// For a step started with [Go], it waits for the step to finish and returns what [Run]
// would: its output, or an [*Error] for its final failure; a failure with attempts left
// suspends the run for the step's retry. For a wait the gateway keeps, it takes the
// next seq unless the future is resolved already, and suspends the run until what it
// waits for comes: see each constructor for the value and the errors. A wait that timed
// out returns an error that is [ErrTimedOut].
//
// Whenever the invocation must end early (a suspension, a retry), Get does not return:
// it unwinds the function, as a step does (from another goroutine than the function's,
// it returns [ErrStopped]).
func (f *Future[T]) Get() (T, error) {
	if err := resolve(&f.f); err != nil {
		var zero T
		return zero, err
	}
	return f.out, nil
}

// resolve waits for f alone, as its Get does, and returns its outcome's error.
func resolve(f *future) error {
	switch {
	case f.bad != nil:
		return f.bad
	case f.done != nil:
		<-f.done
		switch {
		case f.retry != nil:
			return f.st.Halt(invocation.Suspended(f.retry))
		case errors.Is(f.err, ErrStopped):
			return f.st.Halt(nil)
		}
		return f.err
	case f.resolved:
		return f.err
	}
	w := f.wait
	if w.get != nil {
		if err := w.get(f.ctx, w); err != nil {
			return err
		}
		f.resolved = true
		return nil
	}
	st, seq, e, err := nextAwait(f.ctx, w.kind, w.name)
	if err != nil {
		return err
	}
	if e != nil {
		return f.settle(st, e)
	}
	aw := w.await
	aw.Seq, aw.Name = seq, w.name
	return suspend(st, &aw, w.timeout)
}

// settle resolves f with its journal entry e (or a wait_any's, unwrapped).
func (f *future) settle(st *invocation.State, e *protocol.JournalEntry) error {
	f.st, f.seq = st, e.Seq
	f.err = f.wait.decode(st, e)
	f.resolved = true
	return f.err
}

// isDone reports whether f has its outcome: a bad future, a finished step, a resolved
// wait.
func (f *future) isDone() bool {
	if f.bad != nil || f.resolved {
		return true
	}
	if f.done != nil {
		select {
		case <-f.done:
			return true
		default:
		}
	}
	return false
}

// isChild reports whether f is a child run's ([Invoke]).
func (f *future) isChild() bool {
	return f.wait != nil && f.wait.await.Type == protocol.AwaitTypeInvoke
}

// timedOut is the error of the wait at seq named name whose timeout passed.
func timedOut(what string, seq int, name string) error {
	return NonRetryable(fmt.Errorf("%w: %s %d %q", ErrTimedOut, what, seq, name))
}

// futuresOf returns the futures of ws, or a non-retryable error naming fn when one is
// nil.
func futuresOf(fn string, ws []Waitable) ([]*future, error) {
	fs := make([]*future, len(ws))
	for i, w := range ws {
		if w == nil {
			return nil, NonRetryable(fmt.Errorf("step: %s: future %d is nil", fn, i))
		}
		fs[i] = w.waitable()
		if fs[i] == nil {
			return nil, NonRetryable(fmt.Errorf("step: %s: future %d is nil", fn, i))
		}
	}
	return fs, nil
}
