// Package fanout is the README's wait for several child runs: billing.charge_all
// charges two payments as two child runs of billing.charge, at once, and answers their
// receipts in the order given.
package fanout

import (
	"context"
	"errors"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type Receipt struct {
	ID string `json:"id"`
}

// Charge is a payment to charge.
type Charge struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"`
}

// Register adds billing.charge_all and billing.charge to app.
func Register(app *functions.App) {
	functions.Register(app, "billing.charge_all", func(ctx context.Context, in [2]Charge) ([]Receipt, error) {
		return chargeAll(ctx, in[0], in[1])
	})
	functions.Register(app, "billing.charge", func(ctx context.Context, c Charge) (Receipt, error) {
		if c.Amount <= 0 {
			return Receipt{}, step.NonRetryable(errors.New("nothing to charge"))
		}
		return Receipt{ID: "rc_" + c.Card}, nil
	})
}

func chargeAll(ctx context.Context, a, b any) ([]Receipt, error) {
	// docs:begin invoke
	outs, err := step.All( // step.All is step.WaitAll for futures of one type
		step.Invoke[Receipt](ctx, "charge all", "billing.charge", a),
		step.Invoke[Receipt](ctx, "charge all", "billing.charge", b))
	// outs in the order given; err the first child's error, if any
	// docs:end invoke
	return outs, err
}
