package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/internal/programtest"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

func TestMain(m *testing.M) { stack.Main(m) }

// TestProgram builds the program (the README's client example) and runs it against a
// real gateway, configured by STEPGATE_URL and STEPGATE_TOKEN as the README says:
// where orders.refund completes it prints the output; where it fails it logs the
// run's error type and message from a *client.RunError, and exits 0.
func TestProgram(t *testing.T) {
	t.Parallel()
	bin := programtest.Build(t, "examples/client", nil)
	s := stack.Start(t, stack.Options{})
	env := []string{"STEPGATE_URL=" + s.URL, "STEPGATE_TOKEN=" + s.Token}

	register := func(refund func(ctx context.Context, r Refund) (string, error)) {
		app := s.NewApp()
		functions.Register(app, "orders.refund", refund)
		s.Sync(t, s.ServeApp(t, app))
	}

	register(func(ctx context.Context, r Refund) (string, error) {
		return step.Run(ctx, "refund", func(ctx context.Context) (string, error) {
			return fmt.Sprintf("rf_%s_%d", r.OrderID, r.Amount), nil
		})
	})
	code, stdout, all := programtest.Start(t, bin, env...).Wait(t, 2*time.Minute)
	require.Equal(t, 0, code, all)
	require.Equal(t, "refunded: rf_o1_500\n", stdout)

	// A new revision of orders.refund fails every run; the program's next run fails.
	register(func(ctx context.Context, r Refund) (string, error) {
		return "", step.NonRetryable(errors.New("no such order " + r.OrderID))
	})
	code, stdout, all = programtest.Start(t, bin, env...).Wait(t, 2*time.Minute)
	require.Equal(t, 0, code, all)
	require.Empty(t, stdout)
	require.Regexp(t, `run \S+ failed: \S+: no such order o1\n$`, all)
}
