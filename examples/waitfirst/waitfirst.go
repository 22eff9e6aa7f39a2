// Package waitfirst is the README's race of waits: orders.approval takes whichever comes
// first of a manager's approval (a callback), the order's payment (an event), and an
// hour.
package waitfirst

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type (
	Order struct {
		OrderID string `json:"order_id"`
	}
	ApprovalNote struct {
		Note string `json:"note"`
	}
	Payment struct {
		Amount int `json:"amount"`
	}
	Out struct {
		Outcome string `json:"outcome"`
		Note    string `json:"note,omitempty"`
		By      string `json:"by,omitempty"`
	}
)

// Register adds orders.approval to app.
func Register(app *functions.App) {
	functions.Register(app, "orders.approval", approval)
}

func approval(ctx context.Context, in Order) (Out, error) {
	// docs:begin first
	cb, err := step.Callback[ApprovalNote](ctx, "approval", step.Timeout(time.Hour))
	if err != nil {
		return Out{}, err
	}
	paid := step.WaitForEvent[Payment](ctx, "payment", "orders.paid",
		step.Matching(step.Match{"data.order_id": in.OrderID}))
	i, err := step.WaitFirst(ctx, "approval", cb.Result(), paid, step.After(ctx, "hour", time.Hour))
	switch {
	case err != nil:
		return Out{}, err
	case i == 0:
		note, err := cb.Result().Get() // at once; a rejection is err, a *step.Error
		return Out{Outcome: "approved", Note: note.Note}, err
	case i == 1:
		ev, err := paid.Get()
		return Out{Outcome: "paid", By: ev.Sender.Subject}, err
	default:
		return Out{Outcome: "timed_out"}, nil // neither came in an hour: the timer won
	}
	// docs:end first
}
