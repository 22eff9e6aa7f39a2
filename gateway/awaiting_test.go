package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRunAwaiting: a suspended run says what it waits for (a sleep, a step's retry, a
// child run) as its function's answer said, and a run that waits for nothing says none.
func TestRunAwaiting(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "napper", func(ctx context.Context, _ struct{}) (string, error) {
		if _, err := step.Run(ctx, "prepare", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		return "", step.Sleep(ctx, "nap", time.Hour)
	})
	functions.Register(app, "failing", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "charge", func(context.Context) (string, error) { return "", errors.New("card declined") },
			step.Backoff(time.Hour, time.Hour))
	})
	functions.Register(app, "parent", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Invoke[string](ctx, "call", "napper", nil).Get()
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)

	suspended := func(name string) protocol.RunDetail {
		t.Helper()
		id := startAsync(t, c, name, `{}`)
		var run protocol.RunDetail
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			run = getRun(t, c, id)
			assert.Equal(ct, protocol.RunStatusSuspended, run.Status)
		}, 30*time.Second, 10*time.Millisecond)
		return run
	}

	nap := suspended("napper")
	require.Equal(t, &protocol.Awaiting{Kind: protocol.AwaitingKindSleep, Seq: 2, Name: "nap"}, nap.Awaiting)
	require.NotNil(t, nap.WakeAt)

	retry := suspended("failing")
	require.Equal(t, &protocol.Awaiting{Kind: protocol.AwaitingKindRetry, Seq: 1, Name: "charge", Attempt: ptr(1)}, retry.Awaiting)

	parent := suspended("parent")
	require.NotNil(t, parent.Awaiting)
	require.Equal(t, protocol.AwaitingKindInvoke, parent.Awaiting.Kind)
	require.Equal(t, "call", parent.Awaiting.Name)
	require.Equal(t, "napper", *parent.Awaiting.Function)
	child := getRun(t, c, *parent.Awaiting.ChildID)
	require.Equal(t, parent.ID, *child.ParentID)

	resp, err := c.CancelRunWithResponse(t.Context(), nap.ID)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode(), string(resp.Body))
	require.Nil(t, getRun(t, c, nap.ID).Awaiting, "a finished run waits for nothing")
}
