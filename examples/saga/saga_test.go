package saga_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/saga"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestCheckout runs orders.checkout, whose shipping fails for good: the charge is
// refunded, then the reservation released, each once, and the run fails with the
// shipping's error.
func TestCheckout(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	saga.Register(app)
	h := functionstest.New(t, app)

	res := h.Start("orders.checkout", nil).Result()
	require.Equal(t, functionstest.Failed, res.Status, "%+v", res)
	require.Equal(t, "no carrier takes the parcel", res.Error.Message)
	require.Equal(t, []string{"refund ch_1", "release res_1"}, saga.Undone())
}
