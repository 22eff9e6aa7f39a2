package step_test

import (
	"context"
	"errors"
	"time"

	"github.com/stepgate/stepgate/functions/step"
)

type CheckoutOutput struct {
	Shipment struct {
		Tracking string `json:"tracking"`
	} `json:"shipment"`
}

// A function that checks an order out as a child run of orders.checkout, which runs as
// the same identity, and falls back to pickup when the checkout failed.
func ExampleInvoke() {
	_ = func(ctx context.Context, orderID string) (string, error) {
		out, err := step.Invoke[CheckoutOutput](ctx, "checkout", "orders.checkout",
			map[string]any{"order_id": orderID})
		var failed *step.Error
		if errors.As(err, &failed) {
			// The child failed, was cancelled, or could not start (failed.Type says which):
			// journaled, so every replay takes this branch too.
			return "pickup", nil
		}
		if err != nil {
			return "", err
		}
		return out.Shipment.Tracking, nil
	}
}

type Approval struct {
	Approved bool   `json:"approved"`
	Note     string `json:"note"`
}

// A function that asks for an approval and waits a day for the answer, a message on
// topic "approval" (sent by a client with POST /v1/runs/{id}/messages, or by another
// run with step.Send), then tells the run that asked for it.
func ExampleReceive() {
	_ = func(ctx context.Context, in struct {
		Requester string `json:"requester"` // a run id
	}) (bool, error) {
		got, err := step.Receive[Approval](ctx, "approval", 24*time.Hour)
		if err != nil {
			return false, err
		}
		approved := !got.TimedOut && got.Message.Data.Approved
		// got.Message.Sender is who approved: journaled with the message.
		err = step.Send(ctx, in.Requester, "approval.done", map[string]bool{"approved": approved})
		var refused *step.Error
		if errors.As(err, &refused) {
			// The requester has finished, or is no run of this tenant (refused.Type):
			// journaled, so every replay takes this branch too.
			return approved, nil
		}
		return approved, err
	}
}
