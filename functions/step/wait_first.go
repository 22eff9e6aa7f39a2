package step

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
)

// Bounds of a [WaitFirst] of waits the gateway keeps, as the gateway has them.
const (
	// MaxWaitFirst is how many futures other than a timer one WaitFirst may take (the
	// gateway's bound on a wait_any's alternatives).
	MaxWaitFirst = 8
	// WaitFirstTimeout is the wait_any's timeout when no timer is among the futures: the
	// longest the gateway allows (10 years).
	WaitFirstTimeout = 10 * 365 * 24 * time.Hour
	// minTimeout is the shortest timeout the gateway allows a wait_any: a timer with
	// less left waits that long.
	minTimeout = time.Second
)

// WaitFirst waits until the first of futures comes and returns its index, in the order
// given; then that future's [Future.Get] returns its outcome without waiting. The
// futures not chosen stay as they were: a later Get waits for each anew (a message not
// chosen was not taken). futures are either all steps started with [Go], or all waits
// the gateway keeps; other combinations are a non-retryable error, returned without
// taking a seq, that says why.
//
// Waits the gateway keeps (events, messages, callbacks' results, and at most one timer)
// are one await at one seq, named name (an entry of kind wait_any): the run suspends
// until the first of them comes, and the gateway ends the others' waits in the same
// transaction. An event, message or resolution that has come already when the run
// suspends is taken at once, the first in order. The timer ([After], [At]) is the
// wait's timeout: it wins when it passes first (a timer with less than 1s left waits 1s,
// the gateway's least); with no timer, the timeout is [WaitFirstTimeout], and when it
// passes WaitFirst returns -1 and an error that is [ErrTimedOut]. With a timer, a
// callback among the futures expires when the timer passes, chosen or not (the gateway
// makes the end of a wait for a callback its expiry); without one, it keeps its own.
// The choice is journaled, so a replay returns the same index without waiting. Of such
// waits, one resolved already (by an earlier Get or WaitFirst) is chosen at once, the
// first in order, taking no seq; a timer alone is waited for as its Get would. At most [MaxWaitFirst] futures besides
// the timer; two receives of one topic, a future made with a [Timeout] option (use a
// timer), or a child run ([Invoke]: the gateway's wait_any has no child-run
// alternative; wait with Get or [WaitAll]) are non-retryable errors.
//
// Steps started with [Go] run in this process: WaitFirst waits for the first of them to
// finish and journals its index as a step named name (taking a seq), so that a replay
// picks the same one whichever finishes first then.
//
// name must be 1 to 255 bytes. It returns [ErrNoInvocation] when ctx is not an
// invocation's, and the error a future was made with (a bad option, say), if any, as a
// non-retryable error.
func WaitFirst(ctx context.Context, name string, futures ...Waitable) (int, error) {
	if err := checkWaiter(ctx, fmt.Sprintf("WaitFirst %q", name)); err != nil {
		return -1, err
	}
	fs, err := futuresOf(fmt.Sprintf("WaitFirst %q", name), futures)
	if err != nil {
		return -1, err
	}
	if len(fs) == 0 {
		return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: no futures", name))
	}
	parallel, timer := 0, -1
	for i, f := range fs {
		switch {
		case f.bad != nil:
			return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: future %d: %w", name, i, f.bad))
		case f.done != nil:
			parallel++
		case f.isChild():
			return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: future %d is a child run (Invoke %q), which WaitFirst cannot wait for: the gateway waits for the first of events, messages, callbacks and a timer only; wait for a child run with its Get, or for several with WaitAll", name, i, f.wait.name))
		case f.wait.timer != nil && timer >= 0:
			return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: futures %d and %d are both timers; the gateway's wait has one timeout: give it one timer", name, timer, i))
		case f.wait.timer != nil:
			timer = i
		}
	}
	if parallel > 0 && parallel < len(fs) {
		return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: mixes %d steps started with Go, which run in this process, with %d waits the gateway keeps, which suspend the run: the first of both cannot be waited for; wait for the steps first (WaitFirst or WaitAll of them alone)", name, parallel, len(fs)-parallel))
	}
	if parallel > 0 {
		return firstParallel(ctx, name, fs)
	}
	return firstKept(ctx, name, fs, timer)
}

// firstParallel is WaitFirst of steps started with Go: the first to finish in this
// process, journaled as a step.
func firstParallel(ctx context.Context, name string, fs []*future) (int, error) {
	i, err := Run(ctx, name, func(context.Context) (int, error) {
		cases := make([]reflect.SelectCase, len(fs))
		for i, f := range fs {
			cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(f.done)}
		}
		i, _, _ := reflect.Select(cases)
		return i, nil
	}, MaxAttempts(1))
	if err != nil {
		return -1, err
	}
	if i < 0 || i >= len(fs) {
		st := invocation.From(ctx)
		return -1, st.Halt(invocation.Failed("nondeterminism", fmt.Sprintf("WaitFirst %q: the journal chose future %d of %d", name, i, len(fs))))
	}
	return i, nil
}

// firstKept is WaitFirst of waits the gateway keeps, timer the index of the timer
// among them (-1: none): one wait_any.
func firstKept(ctx context.Context, name string, fs []*future, timer int) (int, error) {
	for i, f := range fs {
		if f.resolved {
			return i, nil
		}
	}
	if timer >= 0 && len(fs) == 1 {
		return 0, resolve(fs[0])
	}
	var of []protocol.Await
	var alts []int // the index in fs of each alternative
	topics := map[string]int{}
	for i, f := range fs {
		if i == timer {
			continue
		}
		w := f.wait
		if w.timeout > 0 {
			return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: future %d (%s %q) has a Timeout option; in WaitFirst the timeout is a timer among the futures (After or At)", name, i, w.kind, w.name))
		}
		if w.await.Type == protocol.AwaitTypeReceive {
			if j, ok := topics[w.name]; ok {
				return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: futures %d and %d both receive topic %q; only one receive of a topic can be waited for at once", name, j, i, w.name))
			}
			topics[w.name] = i
		}
		of, alts = append(of, w.await), append(alts, i)
	}
	if len(of) > MaxWaitFirst {
		return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: %d futures besides a timer, more than %d", name, len(of), MaxWaitFirst))
	}
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindWaitAny, name)
	if err != nil {
		return -1, err
	}
	if e == nil {
		timeout := WaitFirstTimeout
		if timer >= 0 {
			timeout = max(fs[timer].wait.timer(), minTimeout)
		}
		for i := range of {
			of[i].Seq, of[i].Name = seq, name
		}
		aw := &protocol.Await{Type: protocol.AwaitTypeWaitAny, Seq: seq, Name: name, Of: &of}
		return -1, suspend(st, aw, timeout)
	}
	got, err := replay[struct {
		TimedOut bool               `json:"timed_out"`
		Index    int                `json:"index"`
		Kind     protocol.EntryKind `json:"kind"`
		Output   json.RawMessage    `json:"output"`
	}](st, e)
	if err != nil {
		return -1, err
	}
	if got.TimedOut {
		if timer < 0 {
			return -1, timedOut("WaitFirst", seq, name)
		}
		f := fs[timer]
		f.st, f.seq, f.resolved = st, seq, true
		return timer, nil
	}
	if got.Index < 0 || got.Index >= len(alts) || fs[alts[got.Index]].wait.kind != got.Kind {
		return -1, st.Diverged(seq,
			protocol.ReplayStep{Seq: seq, Kind: string(got.Kind), Name: name},
			protocol.ReplayStep{Seq: seq, Kind: string(protocol.EntryKindWaitAny), Name: name},
			fmt.Sprintf("WaitFirst %d %q: the journal chose alternative %d, a %s, which the code does not wait for there", seq, name, got.Index, got.Kind))
	}
	i := alts[got.Index]
	_ = fs[i].settle(st, &protocol.JournalEntry{Seq: seq, Name: name, Kind: got.Kind, Output: (*protocol.AnyJSON)(&got.Output)})
	return i, nil
}
