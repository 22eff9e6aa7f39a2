// Package functionstest_test tests functions/functionstest (the Go SDK's harness)
// against a real gateway: its replay of a run that a gateway (internal/wiring/stack) ran
// and exported. It lives in the server's module because the SDK's module
// (functions/go.mod) does not import the server, not even in its tests.
package functionstest_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

// The helpers below are those of functions/functionstest's own tests
// (harness_test.go, replay_fixture_test.go), which this package cannot import.

type item struct {
	Item string `json:"item"`
}

// newApp returns an app that needs no signatures, logging to the test's output.
func newApp(t *testing.T) *functions.App {
	return functions.New(functions.Config{InsecureSkipVerify: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
}

// registerCheckout registers function name: steps a and b (in that order), a sleep
// named "cool off" (none when sleep is 0), then a step "ship"; every step function adds
// one to ran.
func registerCheckout(app *functions.App, name, a, b string, sleep time.Duration, ran *atomic.Int64) {
	functions.Register(app, name, func(ctx context.Context, in item) (string, error) {
		for _, s := range []string{a, b} {
			if _, err := step.Run(ctx, s, func(context.Context) (string, error) {
				ran.Add(1)
				return s[:1] + "-" + in.Item, nil
			}); err != nil {
				return "", err
			}
		}
		if sleep > 0 {
			if err := step.Sleep(ctx, "cool off", sleep); err != nil {
				return "", err
			}
		}
		return step.Run(ctx, "ship", func(context.Context) (string, error) {
			ran.Add(1)
			return "shipped " + in.Item, nil
		})
	})
}
