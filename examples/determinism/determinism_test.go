package determinism_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/determinism"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestDecide runs runs.decide to its end, an hour later, in a second invocation: the
// values it answers are the ones the first invocation journaled, of the shapes the
// README gives (a UTC time, a version 4 UUID, a float in [0, 1)).
func TestDecide(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	determinism.Register(app)
	h := functionstest.New(t, app)

	run := h.Start("runs.decide", nil)
	require.Equal(t, functionstest.Suspended, run.Result().Status)
	res := run.Advance(time.Hour)
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.Equal(t, 2, res.Invocations, "the values were replayed by a second invocation")
	var got determinism.Decision
	require.NoError(t, res.Decode(&got))

	journaled := map[string]json.RawMessage{}
	for _, e := range run.Journal() {
		if e.Output != nil {
			journaled[e.Name] = json.RawMessage(*e.Output)
		}
	}
	var started time.Time
	var orderID string
	var sample float64
	require.NoError(t, json.Unmarshal(journaled["started"], &started))
	require.NoError(t, json.Unmarshal(journaled["order-id"], &orderID))
	require.NoError(t, json.Unmarshal(journaled["ab-sample"], &sample))
	require.True(t, got.Started.Equal(started))
	require.Equal(t, time.UTC, started.Location())
	require.Equal(t, orderID, got.OrderID)
	require.Equal(t, uuid.Version(4), uuid.MustParse(orderID).Version())
	require.Equal(t, sample, got.Sample)
	require.GreaterOrEqual(t, sample, 0.0)
	require.Less(t, sample, 1.0)
	require.Equal(t, map[bool]string{true: "a", false: "b"}[sample < 0.1], got.Branch)
}
