// Package concurrency is the README's concurrency limit: orders.fulfil fulfils one
// order per customer at a time; the others of that customer wait, queued.
package concurrency

import (
	"context"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type Order struct {
	CustomerID string `json:"customer_id"`
	OrderID    string `json:"order_id"`
}

// pick stands for the warehouse's work on an order.
var pick = func(ctx context.Context, o Order) error { return nil }

// Fulfil picks the order in a step.
func Fulfil(ctx context.Context, o Order) (bool, error) {
	return step.Run(ctx, "pick", func(ctx context.Context) (bool, error) { return true, pick(ctx, o) })
}

// Register adds orders.fulfil to app.
func Register(app *functions.App) {
	// docs:begin limit
	functions.Register(app, "orders.fulfil", Fulfil,
		functions.Concurrency(1, "input.customer_id")) // one fulfilment per customer at a time
	// docs:end limit
}
