package maintenance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// TestSweeper: the Sweeper enqueues, in the transaction that finds them, a job for the
// runs due for longer than its grace with no live job, and not for those due within it;
// it logs how many, or its failure, which enqueues nothing.
func TestSweeper(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	stranded, recent := newRun(t, db), newRun(t, db)
	exec(t, db, `UPDATE stepgate.run SET created_at = now() - interval '1 hour' WHERE id = $1`, stranded.ID)

	var log logs
	enq := &enqueuer{fail: errors.New("no room")}
	s := maintenance.NewSweeper(db, enq.enqueue, time.Minute, maintenance.NewHealth(clock.NewTest(time.Now())), log.logger())
	s.Pass(t.Context())
	require.Empty(t, enq.enqueued())
	require.Contains(t, log.String(), "sweeping stranded runs failed; the next pass retries")

	enq.fail = nil
	s.Pass(t.Context())
	require.Equal(t, []string{stranded.ID}, enq.enqueued(), "the stranded run, not the one due within the grace")
	require.Equal(t, "queued", status(t, db, recent.ID))
	require.Contains(t, log.String(), "enqueued runs that were due with no live job")
	require.Contains(t, log.String(), "runs=1")
}

// TestSweeperTakesARunWhoseOnlyJobIsForLater: a suspended run that another transaction
// made due (an awaited run's end, a freed slot) while no gateway heard of it is stranded
// though its wait's timeout job is scheduled for later; a run due with a job at its due
// time is not.
func TestSweeperTakesARunWhoseOnlyJobIsForLater(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	woken, sleeping := newRun(t, db), newRun(t, db)
	// Both due 90s ago, past the grace (a minute); the sleeping run's job became due 50s
	// ago, within the grace: River's scheduler is about to make it available.
	for _, r := range []struct {
		id, jobAt string
	}{{woken.ID, "now() + interval '1 day'"}, {sleeping.ID, "now() - interval '50 seconds'"}} {
		exec(t, db, `UPDATE stepgate.run SET status = 'suspended', wake_at = now() - interval '90 seconds' WHERE id = $1`, r.id)
		exec(t, db, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, priority)
			VALUES (jsonb_build_object('run_id', $1::text), 'stepgate.invoke', 25, 'default', 'scheduled', `+r.jobAt+`, 1)`, r.id)
	}
	var log logs
	enq := &enqueuer{}
	maintenance.NewSweeper(db, enq.enqueue, time.Minute, maintenance.NewHealth(clock.NewTest(time.Now())), log.logger()).Pass(t.Context())
	require.Equal(t, []string{woken.ID}, enq.enqueued(), "its only job is a day away; the sleeping run's job is due, River's to make available")
}
