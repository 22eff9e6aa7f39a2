package step_test

import (
	"context"
	"errors"
	"fmt"
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
			map[string]any{"order_id": orderID}).Get()
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

// A function that starts an audit export as a detached child: cancelling the order's
// run cancels its other children, but the export runs to its end.
func ExampleDetached() {
	_ = func(ctx context.Context, orderID string) (string, error) {
		return step.Invoke[string](ctx, "export", "audit.export",
			map[string]any{"order_id": orderID}, step.Detached()).Get()
	}
}

// A function that hands a checkout URL back to the user before it ends, and reports its
// progress; a client long-polls GET /v1/runs/{id}/values/checkout_url?wait=30s.
func ExampleSetValue() {
	_ = func(ctx context.Context, orderID string) (string, error) {
		url, err := step.Run(ctx, "create-session", func(ctx context.Context) (string, error) {
			return "https://pay.example/" + orderID, nil // the payment provider's call
		})
		if err != nil {
			return "", err
		}
		if err := step.SetValue(ctx, "checkout_url", url); err != nil {
			return "", err
		}
		return "paid", step.SetValue(ctx, "progress", 100)
	}
}

// A function that streams an LLM's tokens to a browser as it generates them, inside a
// step: a replay does not write them again. The browser reads
// GET /v1/runs/{id}/streams/tokens (server-sent events).
func ExampleStream() {
	generate := func(ctx context.Context, prompt string, token func(string) error) (string, error) {
		return "", nil // the model's client, calling token for each token
	}
	_ = func(ctx context.Context, prompt string) (string, error) {
		out, err := step.Stream(ctx, "tokens")
		if err != nil {
			return "", err
		}
		answer, err := step.Run(ctx, "generate", func(ctx context.Context) (string, error) {
			return generate(ctx, prompt, out.WriteString)
		})
		if err != nil {
			return "", err
		}
		return answer, out.Close()
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
		got, err := step.Receive[Approval](ctx, "approval", step.Timeout(24*time.Hour)).Get()
		if err != nil && !errors.Is(err, step.ErrTimedOut) {
			return false, err
		}
		approved := err == nil && got.Data.Approved
		// got.Sender is who approved: journaled with the message.
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

// A function that asks a manager to approve a refund: it makes a callback, mails its URL
// in a step (so the mail goes out once), and waits up to three days for the answer.
func ExampleCallback() {
	type decision struct {
		Approved bool `json:"approved"`
	}
	sendMail := func(to, body string) error { return nil }
	_ = func(ctx context.Context, manager string) (string, error) {
		cb, err := step.Callback[decision](ctx, "manager-approval", step.Timeout(72*time.Hour))
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "ask", func(ctx context.Context) (bool, error) {
			return true, sendMail(manager, "Approve the refund? POST {\"approved\": true} to "+cb.URL)
		}); err != nil {
			return "", err
		}
		res, err := cb.Result().Get()
		var rejected *step.Error
		switch {
		case errors.As(err, &rejected): // POST <url>/reject {"message": "..."}
			return "refused: " + rejected.Message, nil
		case errors.Is(err, step.ErrTimedOut): // the callback expired after 72h
			return "nobody answered", nil
		case err != nil:
			return "", err
		case !res.Approved:
			return "not approved", nil
		}
		return "approved", nil
	}
}

// A function that stamps an order with a time and an id read between steps: both are
// journaled once, so every replay (after the sleep) sees the same ones.
func ExampleNow() {
	_ = func(ctx context.Context, orderID string) (string, error) {
		placed, err := step.Now(ctx, "placed-at")
		if err != nil {
			return "", err
		}
		receipt, err := step.UUID(ctx, "receipt-id")
		if err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "cool-off", time.Hour); err != nil {
			return "", err
		}
		if time.Since(placed) > 24*time.Hour { // the same answer on every replay of this run
			return "", step.NonRetryable(errors.New("too late"))
		}
		return receipt, nil
	}
}

// A function whose total changed while runs were suspended in its sleep: runs that
// computed the old total before the deploy replay it, the others compute the new one.
func ExamplePatched() {
	oldTotal := func(context.Context) (int, error) { return 100, nil }
	roundedTotal := func(context.Context) (int, error) { return 100, nil }
	_ = func(ctx context.Context, orderID string) (int, error) {
		if err := step.Sleep(ctx, "hold", time.Hour); err != nil {
			return 0, err
		}
		patched, err := step.Patched(ctx, "fix-rounding")
		if err != nil {
			return 0, err
		}
		if patched {
			return step.Run(ctx, "total-v2", roundedTotal)
		}
		return step.Run(ctx, "total", oldTotal)
	}
}

// A function that waits for whichever comes first: the order's payment event, a
// cancellation message, or a timer of one hour.
func ExampleWaitFirst() {
	type paid struct {
		Amount int `json:"amount"`
	}
	_ = func(ctx context.Context, orderID string) (string, error) {
		payment := step.WaitForEvent[paid](ctx, "payment", "order.paid",
			step.Matching(step.Match{"data.order_id": orderID}))
		cancel := step.Receive[string](ctx, "cancel")
		hour := step.After(ctx, "pay-within", time.Hour)
		i, err := step.WaitFirst(ctx, "paid-or-cancelled", payment, cancel, hour)
		if err != nil {
			return "", err
		}
		switch i {
		case 0:
			ev, err := payment.Get() // resolved: returns at once
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("paid %d", ev.Data.Amount), nil
		case 1:
			return "cancelled", nil
		}
		return "expired", nil
	}
}

// A function that runs two child runs at once and a step meanwhile, and waits for all.
func ExampleWaitAll() {
	_ = func(ctx context.Context, orderID string) (string, error) {
		label := step.Go(ctx, "label", func(ctx context.Context) (string, error) {
			return "label-" + orderID, nil // a carrier's call
		})
		stock := step.Invoke[int](ctx, "reserve", "stock.reserve", orderID)
		charge := step.Invoke[string](ctx, "charge", "payments.charge", orderID)
		if err := step.WaitAll(ctx, label, stock, charge); err != nil {
			return "", err
		}
		l, _ := label.Get() // resolved: each Get returns its outcome at once
		receipt, _ := charge.Get()
		return l + " " + receipt, nil
	}
}
