package parallel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/parallel"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestCheapest runs quotes.cheapest: both prices are journaled, each under its step's
// name, and the run answers the lower.
func TestCheapest(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	parallel.Register(app)
	h := functionstest.New(t, app)

	run := h.Start("quotes.cheapest", "sku-1")
	res := run.Result()
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `100`, string(res.Output))
	prices := map[string]string{}
	for _, e := range run.Journal() {
		prices[e.Name] = string(*e.Output)
	}
	require.Equal(t, map[string]string{"price from A": "125", "price from B": "100"}, prices)
}
