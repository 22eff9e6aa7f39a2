// Package waitshape is the docs' wait that changes shape (docs/versioning.md):
// refunds.approve used to wait for a manager's approval alone (the callback's await); the
// new code reminds the manager after a day (a WaitFirst of the approval and a timer, a
// wait_any in the journal), behind step.Patched, so that runs suspended on the old code
// resume on the new code.
package waitshape

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type (
	Refund struct {
		OrderID string `json:"order_id"`
		Manager string `json:"manager"`
	}
	Decision struct {
		Approved bool `json:"approved"`
	}
)

// ask stands for mailing the manager the callback's URL.
func ask(r Refund, url string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return r.Manager + ": approve? POST " + url, nil }
}

// decide reads the approval's outcome.
func decide(d Decision, err error) (string, error) {
	var rejected *step.Error
	switch {
	case errors.As(err, &rejected):
		return "refused: " + rejected.Message, nil
	case errors.Is(err, step.ErrTimedOut):
		return "nobody answered", nil
	case err != nil:
		return "", err
	}
	return fmt.Sprintf("approved: %t", d.Approved), nil
}

// Old is the code before the change: it waits for the approval alone.
func Old(app *functions.App) {
	functions.Register(app, "refunds.approve", func(ctx context.Context, r Refund) (string, error) {
		cb, err := step.Callback[Decision](ctx, "approval", step.Timeout(72*time.Hour))
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "ask", ask(r, cb.URL)); err != nil {
			return "", err
		}
		return decide(cb.Result().Get())
	})
}

// Unpatched is the change made without a patch: runs suspended on Old fail with
// nondeterminism when they resume.
func Unpatched(app *functions.App) {
	functions.Register(app, "refunds.approve", func(ctx context.Context, r Refund) (string, error) {
		cb, err := step.Callback[Decision](ctx, "approval", step.Timeout(72*time.Hour))
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "ask", ask(r, cb.URL)); err != nil {
			return "", err
		}
		first, err := step.WaitFirst(ctx, "approval-or-a-day", cb.Result(), step.After(ctx, "a-day", 24*time.Hour))
		if err != nil {
			return "", err
		}
		if first == 1 {
			if _, err := step.Run(ctx, "remind", ask(r, cb.URL)); err != nil {
				return "", err
			}
		}
		return decide(cb.Result().Get())
	})
}

// New is the change behind a patch.
func New(app *functions.App) {
	functions.Register(app, "refunds.approve", approve)
}

// docs:begin approve
func approve(ctx context.Context, r Refund) (string, error) {
	cb, err := step.Callback[Decision](ctx, "approval", step.Timeout(72*time.Hour))
	if err != nil {
		return "", err
	}
	if _, err := step.Run(ctx, "ask", ask(r, cb.URL)); err != nil {
		return "", err
	}
	remind, err := step.Patched(ctx, "remind-after-a-day")
	if err != nil {
		return "", err
	}
	if remind { // the new code: the first of the approval and a day
		first, err := step.WaitFirst(ctx, "approval-or-a-day", cb.Result(), step.After(ctx, "a-day", 24*time.Hour))
		if err != nil {
			return "", err
		}
		if first == 1 { // a day passed: remind, then wait for the approval alone
			if _, err := step.Run(ctx, "remind", ask(r, cb.URL)); err != nil {
				return "", err
			}
		}
	}
	// A run suspended on the old code journals its approval here, as the old code's
	// wait for the callback alone; for the new code, the approval came first (Get
	// returns it at once), or the reminder went out and this waits for it.
	return decide(cb.Result().Get())
}

// docs:end approve
