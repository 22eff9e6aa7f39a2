package maintenance_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// TestRenewer: every interval on its clock, and not before, the Renewer renews the
// leases in flight to its TTL, in one statement, and hands over the leases it could not
// renew (another invocation owns the run); it stops when its context ends.
func TestRenewer(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	kept, stolen := newRun(t, db, claimed), newRun(t, db, claimed)
	exec(t, db, `UPDATE stepgate.run SET invocation = 2 WHERE id = $1`, stolen.ID) // recovered and claimed again elsewhere

	var (
		mu   sync.Mutex
		lost []journal.Lease
	)
	leases := func() []journal.Lease {
		return []journal.Lease{{RunID: kept.ID, Invocation: 1}, {RunID: stolen.ID, Invocation: 1}}
	}
	abandon := func(ls []journal.Lease) {
		mu.Lock()
		defer mu.Unlock()
		lost = append(lost, ls...)
	}
	lostSoFar := func() []journal.Lease {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lost)
	}
	clk := clock.NewTest(time.Now())
	const every = time.Second
	r := maintenance.NewRenewer(db, time.Hour, every, leases, abandon, maintenance.NewHealth(clk), (&logs{}).logger(), clk)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.Run(ctx) }()

	eventually(t, "the renewer waits", func() bool { return clk.Timers() == 1 })
	clk.Advance(every - time.Nanosecond)
	require.Equal(t, 1, clk.Timers(), "not before its interval")
	require.Less(t, leaseLeft(t, db, kept.ID), 2*time.Minute, "not renewed yet")
	clk.Advance(time.Nanosecond)
	eventually(t, "the lost lease handed over", func() bool { return len(lostSoFar()) > 0 })
	require.Equal(t, []journal.Lease{{RunID: stolen.ID, Invocation: 1}}, lostSoFar())
	require.Greater(t, leaseLeft(t, db, kept.ID), 59*time.Minute, "renewed to its TTL")

	eventually(t, "the renewer waits again", func() bool { return clk.Timers() == 1 })
	cancel()
	<-stopped
	require.Zero(t, clk.Timers(), "its timer stopped")
}

// leaseLeft returns how long run id's lease has left, by the database clock.
func leaseLeft(t *testing.T, db *pgxpool.Pool, id string) time.Duration {
	t.Helper()
	var secs float64
	require.NoError(t, db.QueryRow(t.Context(),
		`SELECT extract(epoch FROM lease_until - now())::float8 FROM stepgate.run WHERE id = $1`, id).Scan(&secs))
	return time.Duration(secs * float64(time.Second))
}
