package waitevent_test

import (
	"bytes"
	"log"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/waitevent"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestShip runs orders.ship: an event for another order leaves it waiting, the
// order's payment resumes it (it logs who paid), and an order not paid within an hour
// fails for good.
func TestShip(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	waitevent.Register(app)
	h := functionstest.New(t, app)

	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })

	run := h.Start("orders.ship", map[string]string{"order_id": "o1"})
	require.Equal(t, functionstest.Suspended, run.Result().Status)
	require.Equal(t, 0, h.SendEvent("orders.paid", map[string]any{"order_id": "o2", "amount": 100}), "another order's payment")
	require.Equal(t, 1, h.SendEvent("orders.paid", map[string]any{"order_id": "o1", "amount": 500}))
	require.Equal(t, functionstest.Completed, run.Result().Status, "%+v", run.Result())
	require.Regexp(t, `paid 500 by \S+\n`, logged.String())

	late := h.Start("orders.ship", map[string]string{"order_id": "o3"})
	res := late.Advance(time.Hour)
	require.Equal(t, functionstest.Failed, res.Status)
	require.Equal(t, "not paid within an hour", res.Error.Message)
	require.Equal(t, 2, res.Invocations, "the wait's and the timeout's: a non-retryable error is not retried")
}
