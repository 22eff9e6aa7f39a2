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

// A function that asks a manager to approve a refund: it makes a callback, mails its URL
// in a step (so the mail goes out once), and waits up to three days for the answer.
func ExampleAwaitCallback() {
	type decision struct {
		Approved bool `json:"approved"`
	}
	sendMail := func(to, body string) error { return nil }
	_ = func(ctx context.Context, manager string) (string, error) {
		cb, err := step.Callback(ctx, "manager-approval")
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "ask", func(ctx context.Context) (bool, error) {
			return true, sendMail(manager, "Approve the refund? POST {\"approved\": true} to "+cb.URL)
		}); err != nil {
			return "", err
		}
		res, err := step.AwaitCallback[decision](ctx, cb, 72*time.Hour)
		var rejected *step.Error
		switch {
		case errors.As(err, &rejected): // POST <url>/reject {"message": "..."}
			return "refused: " + rejected.Message, nil
		case err != nil:
			return "", err
		case res.TimedOut:
			return "nobody answered", nil
		case !res.Data.Approved:
			return "not approved", nil
		}
		return "approved", nil
	}
}
