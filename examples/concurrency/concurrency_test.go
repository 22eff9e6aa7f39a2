package concurrency

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

// TestFulfil registers orders.fulfil with a real gateway and holds a customer's first
// order in its step: the customer's second order stays queued, held for the slot, while
// another customer's order runs; once the first ends, the second runs.
func TestFulfil(t *testing.T) {
	entered := make(chan string, 3)
	release := make(chan struct{})
	pick = func(ctx context.Context, o Order) error {
		entered <- o.OrderID
		if o.OrderID == "o1" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	t.Cleanup(func() { pick = func(ctx context.Context, o Order) error { return nil } })

	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	Register(app)
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	start := func(input string) string {
		t.Helper()
		resp, err := c.StartRunWithBodyWithResponse(t.Context(), "orders.fulfil", nil, "application/json", strings.NewReader(input))
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		return resp.JSON202.ID
	}
	await := func(id string) {
		t.Helper()
		select {
		case got := <-entered:
			require.Equal(t, id, got)
		case <-time.After(30 * time.Second):
			t.Fatalf("order %s was not picked in 30s", id)
		}
	}

	first := start(`{"customer_id":"c-9","order_id":"o1"}`)
	await("o1")
	second := start(`{"customer_id":"c-9","order_id":"o2"}`)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		run, err := c.GetRunWithResponse(t.Context(), second, nil)
		if assert.NoError(ct, err) && assert.NotNil(ct, run.JSON200) {
			assert.Equal(ct, protocol.RunStatusQueued, run.JSON200.Status)
			if assert.NotNil(ct, run.JSON200.Held) {
				assert.Equal(ct, "waiting for a concurrency slot of key input.customer_id=c-9 (limit 1)", *run.JSON200.Held)
			}
		}
	}, 30*time.Second, 20*time.Millisecond)
	other := start(`{"customer_id":"c-7","order_id":"o3"}`)
	await("o3")
	stack.AwaitStatus(t, c, other, protocol.RunStatusCompleted)
	select {
	case id := <-entered:
		t.Fatalf("order %s was picked while o1 held the customer's slot", id)
	default:
	}

	close(release)
	stack.AwaitStatus(t, c, first, protocol.RunStatusCompleted)
	await("o2")
	stack.AwaitStatus(t, c, second, protocol.RunStatusCompleted)
}
