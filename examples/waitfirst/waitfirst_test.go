package waitfirst_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/waitfirst"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/protocol"
)

// TestApproval runs orders.approval four ways: the approval comes first, the payment
// comes first, neither comes within the hour, the approval is a rejection (the run
// fails with it).
func TestApproval(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	waitfirst.Register(app)
	h := functionstest.New(t, app)
	decode := func(res functionstest.Result) waitfirst.Out {
		t.Helper()
		var out waitfirst.Out
		require.NoError(t, res.Decode(&out), "%+v", res)
		return out
	}

	approved := h.Start("orders.approval", waitfirst.Order{OrderID: "o1"})
	require.Equal(t, functionstest.Suspended, approved.Result().Status)
	out := decode(approved.ResolveCallback("approval", waitfirst.ApprovalNote{Note: "fine"}))
	require.Equal(t, waitfirst.Out{Outcome: "approved", Note: "fine"}, out)

	paid := h.Start("orders.approval", waitfirst.Order{OrderID: "o2"})
	require.Equal(t, 1, h.SendEvent("orders.paid", map[string]any{"order_id": "o2", "amount": 500}))
	out = decode(paid.Result())
	require.Equal(t, "paid", out.Outcome)
	require.NotEmpty(t, out.By, "the sender's subject")

	late := h.Start("orders.approval", waitfirst.Order{OrderID: "o3"})
	require.Equal(t, waitfirst.Out{Outcome: "timed_out"}, decode(late.Advance(time.Hour)))

	rejected := h.Start("orders.approval", waitfirst.Order{OrderID: "o4"})
	res := rejected.RejectCallback("approval", "rejected", "no budget")
	require.Equal(t, functionstest.Failed, res.Status, "%+v", res)
	require.Equal(t, protocol.ErrorInfo{Type: "rejected", Message: "no budget"}, protocol.ErrorInfo{Type: res.Error.Type, Message: res.Error.Message})
}
