package fanout_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/fanout"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestChargeAll runs billing.charge_all: two child runs of billing.charge, the receipts
// in the order given; when a child fails, the run fails with its error.
func TestChargeAll(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	fanout.Register(app)
	h := functionstest.New(t, app)

	run := h.Start("billing.charge_all", [2]fanout.Charge{{Card: "a", Amount: 5}, {Card: "b", Amount: 7}})
	res := run.Result()
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `[{"id":"rc_a"},{"id":"rc_b"}]`, string(res.Output))
	children := run.Invoked()
	require.Len(t, children, 2)
	for _, c := range children {
		require.Equal(t, "billing.charge", c.Function)
	}

	failing := h.Start("billing.charge_all", [2]fanout.Charge{{Card: "a", Amount: 5}, {Card: "b"}})
	res = failing.Result()
	require.Equal(t, functionstest.Failed, res.Status, "%+v", res)
	require.Contains(t, res.Error.Message, "nothing to charge")
}
