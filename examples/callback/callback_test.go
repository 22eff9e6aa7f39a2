package callback_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/callback"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestLargeRefund runs refunds.large three times: approved, it refunds; rejected, it
// says why; unanswered for 72 hours, it says so. Each run mails the manager once, the
// callback's URL in the mail, however often the run is replayed.
func TestLargeRefund(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	callback.Register(app)
	h := functionstest.New(t, app)
	refund := callback.Refund{OrderID: "o1", Amount: 5000, Manager: "ann@example.com"}

	approved := h.Start("refunds.large", refund)
	require.Equal(t, functionstest.Suspended, approved.Result().Status)
	res := approved.ResolveCallback("manager-approval", callback.Decision{Approved: true})
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `"rf_o1"`, string(res.Output))

	rejected := h.Start("refunds.large", refund)
	res = rejected.RejectCallback("manager-approval", "rejected", "over the limit")
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `"refused: over the limit"`, string(res.Output))

	unanswered := h.Start("refunds.large", refund)
	res = unanswered.Advance(72 * time.Hour)
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `"nobody answered"`, string(res.Output))

	mails := callback.Sent()
	require.Len(t, mails, 3, "one mail a run")
	for _, m := range mails {
		require.True(t, strings.HasPrefix(m, "ann@example.com: Approve a refund of 5000? POST http"), m)
	}
}
