// Package messages is the README's messages between runs: orders.approve waits a day
// for a message on topic "approval", then tells the run that asked for it, by a
// message on topic "done"; orders.request is such a run.
package messages

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type (
	Approval struct {
		Approved bool `json:"approved"`
	}
	Result struct {
		OK bool `json:"ok"`
	}
)

// Register adds orders.approve and orders.request to app.
func Register(app *functions.App) {
	functions.Register(app, "orders.approve", func(ctx context.Context, parentID string) (bool, error) {
		return true, approve(ctx, parentID)
	})
	functions.Register(app, "orders.request", func(ctx context.Context, _ struct{}) (Result, error) {
		done, err := step.Receive[Result](ctx, "done").Get()
		return done.Data, err
	})
}

func approve(ctx context.Context, parentID string) error {
	// docs:begin receive
	got, err := step.Receive[Approval](ctx, "approval", step.Timeout(24*time.Hour)).Get()
	if errors.Is(err, step.ErrTimedOut) {
		return errors.New("no approval within a day")
	}
	if err != nil {
		return err
	}
	log.Printf("%v from %s", got.Data, got.Sender.Subject)

	err = step.Send(ctx, parentID, "done", Result{OK: true}) // a *step.Error when refused
	// docs:end receive
	return err
}
