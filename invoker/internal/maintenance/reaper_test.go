package maintenance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// TestReaper: the Reaper recovers the runs whose lease lapsed, and only those, enqueuing
// their jobs in the transaction that recovers them (a failed enqueue recovers nothing);
// it reaps nothing until the database has answered for two renewal intervals at start,
// and for the lease TTL (stallAfter and two renewal intervals) after an outage, by its
// clock.
func TestReaper(t *testing.T) {
	t.Parallel()
	const renewEvery = time.Second
	dbURL := pgtest.DBURL(t)
	proxy := pgtest.NewProxy(t, dbURL)
	db, err := pgxpool.New(t.Context(), proxy.URL)
	require.NoError(t, err)
	t.Cleanup(db.Close)

	expired, live := newRun(t, db, claimed), newRun(t, db, claimed)
	expire := func(id string) {
		exec(t, db, `UPDATE stepgate.run SET lease_until = now() - interval '1 ms' WHERE id = $1`, id)
	}
	expire(expired.ID)

	clk := clock.NewTest(time.Now())
	health := maintenance.NewHealth(clk)
	var log logs
	enq := &enqueuer{}
	const stallAfter = 3 * time.Second // a lease TTL of 5s
	r := maintenance.NewReaper(db, enq.enqueue, renewEvery, stallAfter, health, log.logger())

	r.Pass(t.Context())
	require.Equal(t, "running", status(t, db, expired.ID), "nothing reaped at start, before the others could renew")
	clk.Advance(2*renewEvery - time.Nanosecond)
	r.Pass(t.Context())
	require.Equal(t, "running", status(t, db, expired.ID), "not yet two renewal intervals")

	clk.Advance(time.Nanosecond)
	enq.fail = errors.New("no room")
	r.Pass(t.Context())
	require.Equal(t, "running", status(t, db, expired.ID), "a failed enqueue recovers nothing")
	require.Contains(t, log.String(), "recovering runs with expired leases failed; the next pass retries")
	require.Contains(t, log.String(), "no room")

	enq.fail = nil
	r.Pass(t.Context())
	require.Equal(t, "queued", status(t, db, expired.ID), "recovered")
	require.Equal(t, []string{expired.ID}, enq.enqueued(), "its job enqueued with it, and no other")
	require.Equal(t, "running", status(t, db, live.ID), "a live lease is untouched")
	require.Contains(t, log.String(), "recovered runs whose gateway stopped renewing their lease")
	require.Contains(t, log.String(), "runs=1")

	// An outage: the pass that meets it restarts the steady time.
	proxy.Cut()
	r.Pass(t.Context())
	proxy.Restore()
	expire(live.ID)
	r.Pass(t.Context())
	require.Equal(t, "running", status(t, db, live.ID), "nothing reaped right after an outage")
	clk.Advance(2 * renewEvery)
	r.Pass(t.Context())
	require.Equal(t, "running", status(t, db, live.ID), "two intervals after an outage: the others may be reconnecting still")
	clk.Advance(stallAfter)
	r.Pass(t.Context())
	require.Equal(t, "queued", status(t, db, live.ID), "reaped once the database answered for a lease TTL")
	require.Equal(t, []string{expired.ID, live.ID}, enq.enqueued())
}

// TestReaperStalled: a reap whose statement answered later than stallAfter after the
// pass began (a database that hung, then judged the leases by a clock that went on
// while no one could renew them) is rolled back, reaping nothing, and the steady time
// restarts; the next pass in time reaps once the database answered for two intervals.
func TestReaperStalled(t *testing.T) {
	t.Parallel()
	const renewEvery = time.Second
	db, err := pgxpool.New(t.Context(), pgtest.DBURL(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	run := newRun(t, db, claimed)
	exec(t, db, `UPDATE stepgate.run SET lease_until = now() - interval '1 ms' WHERE id = $1`, run.ID)

	clk := clock.NewTest(time.Now())
	health := maintenance.NewHealth(clk)
	clk.Advance(2 * renewEvery)
	var log logs
	enq := &enqueuer{}
	// Every reap takes longer than a nanosecond.
	maintenance.NewReaper(db, enq.enqueue, renewEvery, time.Nanosecond, health, log.logger()).Pass(t.Context())
	require.Equal(t, "running", status(t, db, run.ID), "a late reap reaps nothing")
	require.Empty(t, enq.enqueued())
	require.Contains(t, log.String(), "the database answered too late")
	require.False(t, health.SteadyFor(time.Nanosecond), "the stall restarts the steady time")

	r := maintenance.NewReaper(db, enq.enqueue, renewEvery, 3*time.Second, health, log.logger())
	r.Pass(t.Context())
	require.Equal(t, "running", status(t, db, run.ID), "not right after the stall")
	clk.Advance(2*renewEvery + 3*time.Second)
	r.Pass(t.Context())
	require.Equal(t, "queued", status(t, db, run.ID))
}
