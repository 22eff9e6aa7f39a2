// Package saga is the README's compensations: orders.checkout reserves, charges and
// ships an order, and when shipping fails for good it refunds the charge, then
// releases the reservation, in the reverse order of the steps they undo.
package saga

import (
	"context"
	"errors"
	"sync"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type Out struct {
	Tracking string `json:"tracking"`
}

// undone records the compensations run, in order.
var undone struct {
	mu    sync.Mutex
	names []string
}

func record(name string) error {
	undone.mu.Lock()
	defer undone.mu.Unlock()
	undone.names = append(undone.names, name)
	return nil
}

// Undone returns the compensations run so far, in order, each as "what id".
func Undone() []string {
	undone.mu.Lock()
	defer undone.mu.Unlock()
	return append([]string(nil), undone.names...)
}

type (
	store     struct{}
	processor struct{}
)

func (store) Release(reservation string) error { return record("release " + reservation) }
func (processor) Refund(charge string) error   { return record("refund " + charge) }

var (
	inventory store
	payments  processor
)

func reserve(ctx context.Context) (string, error) { return "res_1", nil }
func charge(ctx context.Context) (string, error)  { return "ch_1", nil }

// ship fails for good: no carrier takes the parcel.
func ship(ctx context.Context) (string, error) {
	return "", step.NonRetryable(errors.New("no carrier takes the parcel"))
}

// Register adds orders.checkout to app.
func Register(app *functions.App) {
	functions.Register(app, "orders.checkout", func(ctx context.Context, _ struct{}) (Out, error) {
		return checkout(ctx)
	})
}

func checkout(ctx context.Context) (Out, error) {
	var out Out
	// docs:begin saga
	res, err := step.Run(ctx, "reserve", reserve)
	if err != nil {
		return out, err
	}
	step.Compensate(ctx, "release", func(ctx context.Context) error { return inventory.Release(res) })
	ch, err := step.Run(ctx, "charge", charge)
	if err != nil {
		return out, err
	}
	step.Compensate(ctx, "refund", func(ctx context.Context) error { return payments.Refund(ch) })
	_, err = step.Run(ctx, "ship", ship) // fails for good: refund, then release, then the run fails
	// docs:end saga
	return out, err
}
