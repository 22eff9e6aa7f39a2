package step_test

import (
	"context"
	"errors"

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
