package patched_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/patched"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/protocol"
)

// TestCheckout runs orders.checkout on the patched code: a new run (or one that slept
// in "hold" during the deploy) journals the patch's marker and takes the new path; a
// run the old code journaled its "total" for replays cleanly on the old path.
func TestCheckout(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	patched.Register(app)
	h := functionstest.New(t, app)

	run := h.Start("orders.checkout", patched.Order{Total: 1234})
	require.Equal(t, functionstest.Suspended, run.Result().Status, "it sleeps in hold")
	res := run.Advance(time.Hour)
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `1200`, string(res.Output), "the new code's total")
	var kinds []string
	for _, e := range run.Journal() {
		kinds = append(kinds, string(e.Kind)+" "+e.Name)
	}
	require.Equal(t, []string{"step reserve", "sleep hold", "patch fix-rounding", "step total-v2"}, kinds)

	// testdata/old-run.json: a run of the old code, which journaled "total" (1234).
	r := functionstest.Replay(t, app, "orders.checkout", "testdata/old-run.json")
	require.True(t, r.Clean, r.String())
	require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, r.String())
}
