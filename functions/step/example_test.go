package step_test

import (
	"context"
	"errors"
	"time"

	"github.com/stepgate/stepgate/functions/step"
)

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
