package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// TestDeadlines: each pass arms the deadline timers of the runs that have not ended
// whose deadline is within the lead, at their deadline; a run past its deadline (its
// timer lost with its gateway) at once; not a run whose deadline is past the lead, nor
// one that ended.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	deadline := func(d time.Duration) func(*journal.NewRun) {
		return func(n *journal.NewRun) { at := time.Now().Add(d); n.Deadline = &at }
	}
	near, far := newRun(t, db, deadline(30*time.Second)), newRun(t, db, deadline(time.Hour))
	past, ended := newRun(t, db, deadline(time.Hour)), newRun(t, db, deadline(time.Hour))
	exec(t, db, `UPDATE stepgate.run SET deadline = now() - interval '1 second' WHERE id = ANY($1::uuid[])`, []string{past.ID, ended.ID})
	exec(t, db, `UPDATE stepgate.run SET status = 'completed', output = '1', finished_at = now() WHERE id = $1`, ended.ID)

	clk := clock.NewTest(time.Now())
	a := newArmings()
	d := maintenance.NewDeadlines(db, time.Minute, a.has, a.arm, maintenance.NewHealth(clk), (&logs{}).logger(), clk)
	d.Pass(t.Context())
	got := a.get()
	require.Len(t, got, 2, "the deadlines within the lead of runs going on: %v", got)
	require.Positive(t, got[near.ID])
	require.LessOrEqual(t, got[near.ID], 30*time.Second, "at its deadline")
	require.LessOrEqual(t, got[past.ID], -time.Second, "past its deadline: at once")
	require.NotContains(t, got, far.ID)

	a.arm(near.ID, time.Hour) // armed already, as by the gateway that created it
	d.Pass(t.Context())
	require.Equal(t, time.Hour, a.get()[near.ID], "an armed timer is left alone")
}
