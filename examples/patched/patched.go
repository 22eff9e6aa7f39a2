// Package patched is the README's patch: orders.checkout's new code rounds the total
// (step "total-v2"), behind step.Patched, while the runs the old code journaled its
// "total" for replay the old path.
package patched

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type Order struct {
	Total int `json:"total"`
}

func reserve(o Order) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) { return true, nil }
}

// roundedTotal is the fix: the total rounded to the nearest hundred.
func roundedTotal(o Order) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return (o.Total + 50) / 100 * 100, nil }
}

// oldTotal is what the old code journaled.
func oldTotal(o Order) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return o.Total, nil }
}

// Register adds orders.checkout to app.
func Register(app *functions.App) {
	functions.Register(app, "orders.checkout", checkout)
}

// docs:begin checkout
func checkout(ctx context.Context, o Order) (int, error) {
	if _, err := step.Run(ctx, "reserve", reserve(o)); err != nil {
		return 0, err
	}
	if err := step.Sleep(ctx, "hold", time.Hour); err != nil {
		return 0, err
	}
	patched, err := step.Patched(ctx, "fix-rounding")
	if err != nil {
		return 0, err
	}
	if patched {
		return step.Run(ctx, "total-v2", roundedTotal(o)) // the new code
	}
	return step.Run(ctx, "total", oldTotal(o)) // what runs journaled before the deploy
}

// docs:end checkout
