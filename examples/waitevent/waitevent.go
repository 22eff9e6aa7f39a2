// Package waitevent is the README's wait for an event: orders.ship waits up to an hour
// for the order's payment, an orders.paid event whose data names the order.
package waitevent

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type (
	Order struct {
		OrderID string `json:"order_id"`
	}
	Payment struct {
		Amount int `json:"amount"`
	}
	Out struct{}
)

// Register adds orders.ship to app.
func Register(app *functions.App) {
	functions.Register(app, "orders.ship", ship)
}

func ship(ctx context.Context, in Order) (Out, error) {
	// docs:begin wait
	ev, err := step.WaitForEvent[Payment](ctx, "payment", "orders.paid",
		step.Matching(step.Match{"data.order_id": in.OrderID}), step.Timeout(time.Hour)).Get()
	if errors.Is(err, step.ErrTimedOut) {
		return Out{}, step.NonRetryable(errors.New("not paid within an hour"))
	}
	if err != nil {
		return Out{}, err
	}
	log.Printf("paid %d by %s", ev.Data.Amount, ev.Sender.Subject)
	// docs:end wait
	return Out{}, nil
}
