package messages_test

import (
	"bytes"
	"log"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/messages"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestApprove runs orders.approve for a run of orders.request: the approval message
// resumes it (it logs the approval and its sender), and its "done" message ends the
// requesting run; a run that gets no approval within a day fails. (The harness does not
// refuse a message to a run that has ended, as the gateway does: see functionstest.)
func TestApprove(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	messages.Register(app)
	h := functionstest.New(t, app)

	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })

	requester := h.Start("orders.request", nil)
	require.Equal(t, functionstest.Suspended, requester.Result().Status)
	approver := h.Start("orders.approve", requester.ID())
	require.Equal(t, functionstest.Suspended, approver.Result().Status)
	res := approver.SendMessage("approval", messages.Approval{Approved: true})
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.Regexp(t, `\{true\} from \S+\n`, logged.String())
	require.Len(t, approver.SentMessages(), 1)
	require.Equal(t, requester.ID(), approver.SentMessages()[0].RunID)
	done := requester.Result()
	require.Equal(t, functionstest.Completed, done.Status)
	require.JSONEq(t, `{"ok":true}`, string(done.Output))

	late := h.Start("orders.approve", requester.ID())
	res = late.Advance(24 * time.Hour)
	require.Equal(t, functionstest.Failed, res.Status)
	require.Equal(t, "no approval within a day", res.Error.Message)

}
