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

// Patched reports whether the run takes the patched code path of the patch called name,
// so that a function's code can change while runs of the old code are suspended (a
// sleep, a wait, a child run) and must replay what they journaled:
//
//	if patched, err := step.Patched(ctx, "fix-rounding"); err != nil {
//		return 0, err
//	} else if patched {
//		total, err = step.Run(ctx, "total-v2", roundedTotal)
//	} else {
//		total, err = step.Run(ctx, "total", oldTotal)
//	}
//
// It is true for a run that reaches the patch for the first time on code that has it: the
// journal holds nothing at the run's next seq, so Patched journals a marker there (an
// entry of kind patch, named name, checkpointed like a step) before returning; and true
// again on each replay of that run, which finds its marker. It is false, without taking
// a seq, for a run whose journal holds another entry at that seq: the run went past this
// point on code from before the patch, and must replay the old path. The old path must
// still be deterministic: code that replays into a change with no patch fails the run
// with nondeterminism, naming what the code asks for and what the journal holds.
//
// Once no run of the old code is left, drop the old branch and replace Patched with
// [DeprecatePatch] of the same name, which consumes the marker of runs that journaled
// one; once no such run is left either, remove that call too.
//
// Call it between steps, from the function's goroutine, not inside a step's function
// ([ErrNested]). name must be 1 to 255 bytes; otherwise it returns a non-retryable error.
// It returns [ErrNoInvocation] when ctx is not an invocation's.
func Patched(ctx context.Context, name string) (bool, error) {
	st, seq, marker, err := patch(ctx, name, false)
	if err != nil || marker != nil {
		return err == nil, err
	}
	if seq == 0 {
		return false, nil
	}
	if err := st.Err(); err != nil {
		return false, st.Halt(invocation.Retry("canceled", fmt.Sprintf("patch %d %q: %v", seq, name, err)))
	}
	now := time.Now().UTC()
	if err := st.Checkpoint(&protocol.JournalEntry{
		Seq: seq, Kind: protocol.EntryKindPatch, Name: name, StartedAt: &now, FinishedAt: &now,
	}); err != nil {
		return false, err
	}
	return true, nil
}

// DeprecatePatch marks where the patch called name was, once the code keeps only its
// patched path (see [Patched]): when the run's journal holds the patch's marker at the
// next seq, it takes that seq so the entries after it replay in place; otherwise it does
// nothing, and journals nothing. Call it where Patched was, as Patched is called.
func DeprecatePatch(ctx context.Context, name string) error {
	_, _, _, err := patch(ctx, name, true)
	return err
}

func patch(ctx context.Context, name string, deprecated bool) (*invocation.State, int, *protocol.JournalEntry, error) {
	st := invocation.From(ctx)
	if st == nil {
		return nil, 0, nil, ErrNoInvocation
	}
	if err := names.Check("patch name", name); err != nil {
		return nil, 0, nil, NonRetryable(fmt.Errorf("step: %w", err))
	}
	seq, marker, err := st.Patch(protocol.EntryKindPatch, name, deprecated)
	if errors.Is(err, ErrNested) {
		err = NonRetryable(err)
	}
	return st, seq, marker, err
}
