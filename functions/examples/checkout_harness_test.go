package examples_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

func harness(t *testing.T) *functionstest.Harness {
	app := functions.New(functions.Config{InsecureSkipVerify: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	examples.Register(app)
	return functionstest.New(t, app)
}

func names(j []protocol.JournalEntry) []string {
	var out []string
	for _, e := range j {
		out = append(out, string(e.Kind)+" "+e.Name)
	}
	return out
}

func TestCheckoutWithTheHarness(t *testing.T) {
	t.Parallel()

	t.Run("SleepsAWeekThenShips", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		h := harness(t)
		week := 7 * 24 * time.Hour
		run := h.Start("orders.checkout", examples.CheckoutInput{OrderID: "o-1", Amount: 995, SleepMS: int(week / time.Millisecond)})
		res := run.Result()
		require.Equal(t, functionstest.Suspended, res.Status)
		require.Equal(t, h.Now().Add(week), res.WakeAt)
		res = run.Advance(week)
		require.Equal(t, functionstest.Completed, res.Status)
		var out examples.CheckoutOutput
		require.NoError(t, res.Decode(&out))
		require.Equal(t, examples.CheckoutOutput{
			Reservation: examples.Reservation{OrderID: "o-1", Reserved: true},
			Charge:      examples.Charge{ChargeID: "ch_o-1", Amount: 995},
			Shipment:    examples.Shipment{Tracking: "trk_o-1"},
		}, out)
		require.Equal(t, []string{"step reserve", "step charge", "sleep cool-off", "step ship"}, names(run.Journal()))
		t.Logf("a checkout sleeping a week took %v", time.Since(start))
	})

	t.Run("FailedShipCompensates", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		run := harness(t).Start("orders.checkout", examples.CheckoutInput{OrderID: "o-2", Amount: 5, FailShip: true})
		res := run.Result()
		require.Equal(t, functionstest.Failed, res.Status)
		require.Contains(t, res.Error.Message, "no carrier ships order o-2")
		require.Equal(t, []string{"step reserve", "step charge", "step ship", "step compensate refund", "step compensate release"},
			names(run.Journal()))
		t.Logf("a failed checkout took %v", time.Since(start))
	})
	t.Run("FulfilRunsCheckoutAsAChild", func(t *testing.T) {
		t.Parallel()
		h := harness(t)
		run := h.Start("orders.fulfil", examples.CheckoutInput{OrderID: "o-3", SleepMS: int(time.Hour / time.Millisecond)})
		require.Equal(t, functionstest.Suspended, run.Result().Status, "the child sleeps")
		res := run.Advance(time.Hour)
		require.Equal(t, functionstest.Completed, res.Status)
		require.JSONEq(t, `{"tracking":"trk_o-3"}`, string(res.Output))
		inv := run.Invoked()
		require.Len(t, inv, 1)
		require.Equal(t, "orders.checkout", inv[0].Function)
		require.Equal(t, []string{"step reserve", "step charge", "sleep cool-off", "step ship"}, names(inv[0].Run.Journal()))
	})

	t.Run("FulfilFailsWithAStubbedCheckout", func(t *testing.T) {
		t.Parallel()
		h := harness(t)
		h.Stub("orders.checkout", func(json.RawMessage) (any, error) {
			return nil, &step.Error{Type: "card_declined", Message: "declined"}
		})
		res := h.Start("orders.fulfil", examples.CheckoutInput{OrderID: "o-4"}).Result()
		require.Equal(t, functionstest.Failed, res.Status)
		require.Contains(t, res.Error.Message, "declined")
	})
}

func TestQuoteWithTheHarness(t *testing.T) {
	t.Parallel()
	run := harness(t).Start("orders.quote", examples.QuoteInput{SKU: "sku-1"})
	res := run.Result()
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res.Error)
	var out examples.QuoteOutput
	require.NoError(t, res.Decode(&out))
	require.Len(t, out.Prices, 3)
	require.Len(t, run.Journal(), 3)
}
