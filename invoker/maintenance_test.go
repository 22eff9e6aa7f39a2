package invoker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// TestMaintenanceRunsOnTheInvokersClock: the invoker's maintenance passes wait on its
// Config.Clock: a dead gateway's run whose lease lapsed (by the database clock) is
// recovered, and completes, once the test advances that clock past a pass (an hour
// apart: on the system clock none would come) and past the Reaper's two renewal
// intervals.
func TestMaintenanceRunsOnTheInvokersClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewTest(time.Now())
	const leaseTTL = 200 * time.Millisecond // renewals every 40ms
	s := stack.Start(t, stack.Options{LeaseTTL: leaseTTL, MaintainInterval: time.Hour, Clock: clk})
	var calls atomic.Int32
	app := s.NewApp()
	functions.Register(app, "quick", func(ctx context.Context, _ struct{}) (string, error) {
		calls.Add(1)
		return "done", nil
	}, functions.InvocationAttempts(1))
	s.Sync(t, s.ServeApp(t, app))

	// A run claimed by a gateway that died before it invoked it.
	run, _, err := journal.CreateRun(ctx, s.Pool, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "quick", Input: json.RawMessage(`{}`),
		Identity: journal.Identity{Subject: "tester", Tenant: auth.DefaultTenant}, Claim: true, Lease: leaseTTL,
	})
	require.NoError(t, err)
	awaitCondition(t, 10*time.Second, func() bool {
		var lapsed bool
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT lease_until < now() FROM stepgate.run WHERE id = $1`, run.ID).Scan(&lapsed))
		return lapsed
	}, "lapse of the lease")
	c := s.Client(t, s.Token)
	require.Equal(t, protocol.RunStatusRunning, getRun(t, c, run.ID).Status, "no pass came: the clock stood still")

	// The Maintainer's wait is at most 1.5 MaintainInterval; the Reaper's rule two
	// renewal intervals. Each advance makes one pass, once the Maintainer waits again
	// (its timer and the Renewer's: two). A pass skips the run while another transaction
	// locks its row (journal.ReapExpiredLeases), as the test's own reads of it may: the next
	// pass retries.
	for passes := 0; getRun(t, c, run.ID).Status == protocol.RunStatusRunning; passes++ {
		require.Less(t, passes, 10, "ten passes did not recover the run")
		awaitCondition(t, 10*time.Second, func() bool { return clk.Timers() >= 2 }, "the maintenance services' timers")
		clk.Advance(2 * time.Hour)
	}
	res := awaitResult(t, c, run.ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, 1, getRun(t, c, run.ID).Recoveries)
}
