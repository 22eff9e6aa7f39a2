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
	// MaxWaitFirst is how many waits one WaitFirst gives the gateway (its bound on a
	// wait_any's alternatives): timers do not count, and receives of one topic count
	// once.
	MaxWaitFirst = 8
	// WaitFirstTimeout is the wait_any's timeout when no future among it can time out
	// (no timer, no Timeout option): the longest the gateway allows (10 years).
	WaitFirstTimeout = 10 * 365 * 24 * time.Hour
	// minTimeout is the shortest timeout the gateway allows a wait_any: a deadline with
	// less left waits that long.
	minTimeout = time.Second
)

// WaitFirst waits until the first of futures comes and returns its index; that future's
// [Future.Get] then returns its outcome at once, and the others stay as they were (a
// later Get waits anew; a message not chosen was not taken). A future resolved already
// is chosen at once, taking no seq.
//
// Waits the gateway keeps are one wait_any named name, whose entry records the choice,
// so a replay returns the same index. Timers ([After], [At]) and waits with a [Timeout]
// option are deadlines: the earliest is the wait's timeout (at least 1s), and its future
// is chosen when it passes first, the lowest index on a tie (a wait's Get then returns
// its [ErrTimedOut] error). Given both durations (After, Timeout: from when the wait is
// stored) and times (At), WaitFirst first journals the time it waits from, as a step
// named name, so that a replay compares the same deadlines. Receives of one topic are
// one wait: a message ends the first of them. A callback among the futures expires when
// the wait times out. Timers alone are the earliest's Get. With no deadline, WaitFirst
// returns -1 and an error that is [ErrTimedOut] after [WaitFirstTimeout].
//
// Steps started with [Go], alone: the first to finish, its index journaled as a step
// named name.
//
// Refused with a non-retryable error that takes no seq: a child run ([Invoke]: the
// gateway's first-of has no child-run alternative; use Get or [WaitAll]), steps started
// with Go mixed with waits the gateway keeps (they run in the process, the waits
// suspend it), more than [MaxWaitFirst] waits, a future made with an error. It returns
// [ErrNoInvocation] when ctx is not an invocation's.
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
	parallel := 0
	for i, f := range fs {
		switch {
		case f.bad != nil:
			return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: future %d: %w", name, i, f.bad))
		case f.done != nil:
			parallel++
		case f.isChild():
			return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: future %d is a child run (Invoke %q), which WaitFirst cannot wait for: the gateway waits for the first of events, messages, callbacks and deadlines, not of a child run; wait for a child run with its Get, or for several with WaitAll", name, i, f.wait.name))
		}
	}
	if parallel > 0 && parallel < len(fs) {
		return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: mixes %d steps started with Go, which run in this process, with %d waits the gateway keeps, which suspend the run: the first of both cannot be waited for; wait for the steps first (WaitFirst or WaitAll of them alone)", name, parallel, len(fs)-parallel))
	}
	if parallel > 0 {
		return firstParallel(ctx, name, fs)
	}
	return firstKept(ctx, name, fs)
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

// firstKept is WaitFirst of waits the gateway keeps: one wait_any, its timeout the
// earliest deadline among them.
func firstKept(ctx context.Context, name string, fs []*future) (int, error) {
	for i, f := range fs {
		if f.resolved {
			return i, nil
		}
	}
	var of []protocol.Await
	var alts []int // the index in fs of each alternative
	var ds []deadline
	topics := map[string]bool{}
	after, at := false, false
	for i, f := range fs {
		w := f.wait
		if d, ok := deadlineOf(i, w); ok {
			ds = append(ds, d)
			after, at = after || !d.fixed, at || d.fixed
		}
		if w.timer != nil {
			continue
		}
		if w.await.Type == protocol.AwaitTypeReceive && w.await.Topic != nil {
			if topics[*w.await.Topic] {
				continue // the first receive of the topic is its alternative
			}
			topics[*w.await.Topic] = true
		}
		of, alts = append(of, w.await), append(alts, i)
	}
	if len(of) > MaxWaitFirst {
		return -1, NonRetryable(fmt.Errorf("step: WaitFirst %q: %d waits besides timers (receives of one topic counted once), more than %d", name, len(of), MaxWaitFirst))
	}
	// The deadlines are compared from a time: any one when they are all durations from
	// the wait or all times (the zero time), the journaled time it waits from when both.
	var from time.Time
	if after && at {
		t, err := Run(ctx, name, func(context.Context) (time.Time, error) { return time.Now().UTC().Round(0), nil }, Lazy())
		if err != nil {
			return -1, err
		}
		from = t
	}
	if len(of) == 0 {
		i := earliest(ds, from).i
		return i, resolve(fs[i])
	}
	st, seq, e, err := nextAwait(ctx, protocol.EntryKindWaitAny, name)
	if err != nil {
		return -1, err
	}
	if e == nil {
		timeout := WaitFirstTimeout
		if len(ds) > 0 {
			d := earliest(ds, from)
			left := d.after
			switch {
			case d.fixed:
				left = time.Until(d.at)
			case at:
				left = time.Until(from.Add(d.after))
			}
			timeout = min(max(left, minTimeout), WaitFirstTimeout)
		}
		for i := range of {
			of[i].Seq, of[i].Name, of[i].Timeout = seq, name, nil
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
		if len(ds) == 0 {
			return -1, timedOut("WaitFirst", seq, name)
		}
		i := earliest(ds, from).i
		f := fs[i]
		if f.wait.timer != nil {
			f.st, f.seq, f.resolved = st, seq, true
			return i, nil
		}
		_ = f.settle(st, &protocol.JournalEntry{Seq: seq, Name: name, Kind: f.wait.kind, Output: new(protocol.AnyJSON(`{"timed_out":true}`))})
		return i, nil
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

// deadline is when a future among a WaitFirst's may come by itself: a timer passes, or
// a wait's Timeout option ends it.
type deadline struct {
	i     int           // the future's index
	fixed bool          // at a time (At); else a duration from when the wait is stored
	at    time.Time     // when fixed
	after time.Duration // when not
}

// deadlineOf returns the deadline of w, the future at index i, if it has one.
func deadlineOf(i int, w *wait) (deadline, bool) {
	switch {
	case w.timer != nil && w.await.Until != nil:
		return deadline{i: i, fixed: true, at: *w.await.Until}, true
	case w.timer != nil:
		d, _ := time.ParseDuration(*w.await.Duration) // After's, a Duration's String
		return deadline{i: i, after: d}, true
	case w.timeout > 0:
		return deadline{i: i, after: w.timeout}, true
	}
	return deadline{}, false
}

// earliest returns the deadline of ds (not empty) that passes first when the wait is
// stored at from, the first in order on a tie. All durations, or all times, compare
// alike whatever from is.
func earliest(ds []deadline, from time.Time) deadline {
	when := func(d deadline) time.Time {
		if d.fixed {
			return d.at
		}
		return from.Add(d.after)
	}
	first := ds[0]
	for _, d := range ds[1:] {
		if when(d).Before(when(first)) {
			first = d
		}
	}
	return first
}
