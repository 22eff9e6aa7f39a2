package step

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stepgate/stepgate/functions/internal/invocation"
)

// CompensationPrefix begins the name of the step that runs a compensation: the step
// of the compensation "release" is "compensate release".
const CompensationPrefix = "compensate "

// Compensate registers fn as the undo of what the run has done so far (a saga's
// compensation), usually right after the step it undoes. When the run fails for good
// (the function returns an error that fails the run: an [*Error], a [NonRetryable]
// error) or the function calls [Rollback], the SDK runs the registered undos newest
// first, each as a journaled step named [CompensationPrefix]+name, with the step's
// retries: a replay does not run one twice, and a crash in the middle goes on where it
// stopped. The run then fails with the original error; when an undo fails for good, the
// others still run and the run's error says the compensation is incomplete, naming it.
//
// Registration is not journaled: it is code, and runs again on every replay, so
// register under the same conditions each time (after the step it undoes). A retryable
// error (the invocation is retried) runs nothing. name must be 1 to 255 bytes with the
// prefix; it returns [ErrNoInvocation] when ctx is not an invocation's.
func Compensate(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	st := invocation.From(ctx)
	if st == nil {
		return ErrNoInvocation
	}
	if len(name) == 0 || len(CompensationPrefix)+len(name) > 255 {
		return NonRetryable(fmt.Errorf("step: compensation name %q is not 1 to %d bytes", name, 255-len(CompensationPrefix)))
	}
	st.PushUndo(invocation.Undo{Name: name, Fn: fn})
	return nil
}

// Rollback runs the registered compensations now, newest first, as [Compensate] says,
// and returns the error the function should return to fail the run with cause: cause,
// non-retryable, noting an incomplete compensation. A function that handles a failure
// itself calls it; one that simply returns a failing error gets the same from the SDK.
func Rollback(ctx context.Context, cause error) error {
	if cause == nil {
		cause = errors.New("rolled back")
	}
	if err := RunCompensations(ctx); err != nil {
		var incomplete *IncompleteCompensation
		if !errors.As(err, &incomplete) {
			return err // the invocation stopped (a retry of an undo): unwinding
		}
		return NonRetryable(fmt.Errorf("%w (%v)", cause, incomplete))
	}
	return NonRetryable(cause)
}

// IncompleteCompensation names the compensations that failed for good.
type IncompleteCompensation struct{ Failed []string }

func (e *IncompleteCompensation) Error() string {
	return "compensation incomplete: " + strings.Join(e.Failed, ", ") + " failed"
}

// RunCompensations runs and forgets the registered compensations, newest first, each as
// a journaled step. It returns an *IncompleteCompensation when some failed for good, or
// the error of a step that stopped the invocation. The SDK calls it when a run fails for
// good; [Rollback] calls it too.
func RunCompensations(ctx context.Context) error {
	st := invocation.From(ctx)
	if st == nil {
		return ErrNoInvocation
	}
	var failed []string
	for _, u := range st.TakeUndos() {
		_, err := Run(ctx, CompensationPrefix+u.Name, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, u.Fn(ctx)
		})
		var se *Error
		switch {
		case errors.As(err, &se):
			failed = append(failed, u.Name)
		case err != nil:
			return err
		}
	}
	if len(failed) > 0 {
		return &IncompleteCompensation{Failed: failed}
	}
	return nil
}
