package functions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
)

// TestConcurrencyOption: Concurrency adds a limit to the function's manifest entry,
// once per call, the function-wide one without a key.
func TestConcurrencyOption(t *testing.T) {
	t.Parallel()
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "fulfil", func(context.Context, empty) (int, error) { return 1, nil },
			functions.Concurrency(10, ""), functions.Concurrency(1, "input.customer_id"))
	})
	r := g.Get(url + "/")
	require.Contains(t, string(r.Body), `"concurrency":[{"limit":10},{"key":"input.customer_id","limit":1}]`)
}
