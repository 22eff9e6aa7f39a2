package waitshape_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/waitshape"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// deploy serves the app that register makes until the next deploy: the code at the
// function's URL, replaced under its suspended runs.
type deploy struct{ app atomic.Pointer[functions.App] }

func (d *deploy) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.app.Load().ServeHTTP(w, r) }

func (d *deploy) to(register func(*functions.App)) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	register(app)
	d.app.Store(app)
}

// harness serves refunds.approve on the old code (waitshape.Old).
func harness(t *testing.T) (*functionstest.Harness, *deploy) {
	d := &deploy{}
	d.to(waitshape.Old)
	return functionstest.NewHandler(t, d, []string{"refunds.approve"}), d
}

func kinds(r *functionstest.Run) []string {
	var out []string
	for _, e := range r.Journal() {
		out = append(out, fmt.Sprintf("%d %s %s", e.Seq, e.Kind, e.Name))
	}
	return out
}

func output(t *testing.T, res functionstest.Result) string {
	t.Helper()
	var s string
	require.NoError(t, res.Decode(&s), "%+v", res)
	return s
}

var refund = waitshape.Refund{OrderID: "o-1", Manager: "ann@example.com"}

// TestOldRunsResumeOnThePatchedCode: runs suspended on the old code's wait for the
// callback alone, then resolved, rejected or expired once the new code is deployed,
// resume on it and end as they would have on the old code.
func TestOldRunsResumeOnThePatchedCode(t *testing.T) {
	t.Parallel()
	h, d := harness(t)
	approved, rejected, expired := h.Start("refunds.approve", refund), h.Start("refunds.approve", refund), h.Start("refunds.approve", refund)
	for _, r := range []*functionstest.Run{approved, rejected, expired} {
		res := r.Result()
		require.Equal(t, functionstest.Suspended, res.Status, "%+v", res)
		require.Equal(t, "await_callback", string(res.Await.Type), "the old code waits for the callback alone")
	}

	d.to(waitshape.New)
	require.Equal(t, "approved: true", output(t, approved.ResolveCallback("approval", waitshape.Decision{Approved: true})))
	require.Equal(t, []string{"1 callback approval", "2 step ask", "3 await_callback approval"}, kinds(approved),
		"no patch marker: the old run's journal held the callback's await where Patched was")
	require.Equal(t, "refused: over budget", output(t, rejected.RejectCallback("approval", "", "over budget")))
	h.Advance(72 * time.Hour)
	require.Equal(t, "nobody answered", output(t, expired.Result()))
}

// TestTheUnpatchedChangeBreaksThem: the same change without the patch fails the old
// code's runs with nondeterminism when they resume: the journal holds the callback's
// await where the new code asks for a wait_any.
func TestTheUnpatchedChangeBreaksThem(t *testing.T) {
	t.Parallel()
	h, d := harness(t)
	run := h.Start("refunds.approve", refund)
	require.Equal(t, functionstest.Suspended, run.Result().Status)

	d.to(waitshape.Unpatched)
	res := run.ResolveCallback("approval", waitshape.Decision{Approved: true})
	require.Equal(t, functionstest.Failed, res.Status, "%+v", res)
	require.Equal(t, "nondeterminism", res.Error.Type, res.Error.Message)
	require.Contains(t, res.Error.Message, "await_callback")
}

// TestNewRunsTakeTheNewPath: runs started on the new code journal the patch's marker and
// wait for the first of the approval and a day, reminding the manager when the day
// passes first.
func TestNewRunsTakeTheNewPath(t *testing.T) {
	t.Parallel()
	h, d := harness(t)
	d.to(waitshape.New)

	quick := h.Start("refunds.approve", refund)
	require.Equal(t, "wait_any", string(quick.Result().Await.Type))
	require.Equal(t, "approved: true", output(t, quick.ResolveCallback("approval", waitshape.Decision{Approved: true})))
	require.Equal(t, []string{"1 callback approval", "2 step ask", "3 patch remind-after-a-day", "4 wait_any approval-or-a-day"}, kinds(quick))

	slow := h.Start("refunds.approve", refund)
	require.Equal(t, functionstest.Suspended, slow.Result().Status)
	res := slow.Advance(24 * time.Hour)
	require.Equal(t, "await_callback", string(res.Await.Type), "reminded, it waits for the approval alone")
	require.Equal(t, "approved: false", output(t, slow.ResolveCallback("approval", waitshape.Decision{})))
	require.Equal(t, []string{"1 callback approval", "2 step ask", "3 patch remind-after-a-day", "4 wait_any approval-or-a-day", "5 step remind", "6 await_callback approval"}, kinds(slow))
}
