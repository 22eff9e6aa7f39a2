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
