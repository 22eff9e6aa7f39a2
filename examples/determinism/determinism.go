// Package determinism is the README's recorded values: runs.decide takes the time, a
// UUID and a random number from the SDK, which journals them, so that a replay (here,
// after an hour's sleep) gets the same ones and takes the same branch.
package determinism

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

// Decision is what runs.decide answers: the values it got, and its branch.
type Decision struct {
	Started time.Time `json:"started"`
	OrderID string    `json:"order_id"`
	Sample  float64   `json:"sample"`
	Branch  string    `json:"branch"`
}

// Register adds runs.decide to app.
func Register(app *functions.App) {
	functions.Register(app, "runs.decide", func(ctx context.Context, _ struct{}) (Decision, error) {
		return decide(ctx)
	})
}

func decide(ctx context.Context) (Decision, error) {
	// docs:begin values
	started, err := step.Now(ctx, "started") // time.Time, UTC
	if err != nil {
		return Decision{}, err
	}
	orderID, err := step.UUID(ctx, "order-id") // a version 4 UUID, "1b4e…-4…"
	if err != nil {
		return Decision{}, err
	}
	sample, err := step.Random(ctx, "ab-sample") // float64 in [0, 1)
	if err != nil {
		return Decision{}, err
	}
	if sample < 0.1 {
		// the same branch on every replay
	}
	// docs:end values
	branch := "b"
	if sample < 0.1 {
		branch = "a"
	}
	// The run suspends here; the invocation after the hour replays the values.
	if err := step.Sleep(ctx, "a while", time.Hour); err != nil {
		return Decision{}, err
	}
	return Decision{Started: started, OrderID: orderID, Sample: sample, Branch: branch}, nil
}
