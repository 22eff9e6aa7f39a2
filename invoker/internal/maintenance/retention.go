// Package maintenance holds the invoker's maintenance duties, one type in one file each,
// constructed with what it needs (a pool, its settings, a logger, a clock) and tested on
// its own against a real Postgres.
package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/retention"
)

// RetentionArgs is the periodic job that deletes what retention lets go: finished runs
// past their retention, then old events and tombstones (retention.DeleteExpiredRuns). The
// leader of the River clients inserts it every Config.RetentionInterval.
type RetentionArgs struct{}

// Kind implements river.JobArgs.
func (RetentionArgs) Kind() string { return "stepgate.retention" }

// RetentionPass bounds one job's work, so that a backlog (a first start after months)
// is deleted over several passes, none holding a worker for long.
const RetentionPass = 30 * time.Second

// Retention is the River worker of RetentionArgs.
//
// What is expired is decided by the database alone: the deletes compare with now() in
// their statements. Its clock governs only how long one pass goes on (RetentionPass).
type Retention struct {
	river.WorkerDefaults[RetentionArgs]
	db        journal.DB
	retention time.Duration
	batch     int
	log       *slog.Logger
	clock     clock.Clock
}

// NewRetention returns the worker that deletes, from db, finished runs past their
// retention (their revision's, else retention), then events and tombstones older than
// retention, batch rows per transaction.
func NewRetention(db journal.DB, retention time.Duration, batch int, log *slog.Logger, clk clock.Clock) *Retention {
	return &Retention{db: db, retention: retention, batch: batch, log: log, clock: clk}
}

// Work deletes in batches, each its own short transaction (rows locked by a concurrent
// pass are skipped), until nothing is left or the pass's time is up.
func (r *Retention) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	until := r.clock.Now().Add(RetentionPass)
	var runs, events, tombstones int
	for _, step := range []struct {
		n   *int
		del func(context.Context, journal.DB, time.Duration, int) (int, error)
	}{
		{&runs, retention.DeleteExpiredRuns},
		{&events, retention.DeleteExpiredEvents},
		{&tombstones, retention.DeleteExpiredTombstones},
	} {
		for r.clock.Now().Before(until) {
			n, err := step.del(ctx, r.db, r.retention, r.batch)
			if err != nil {
				return err
			}
			*step.n += n
			if n < r.batch {
				break
			}
		}
	}
	if runs+events+tombstones > 0 {
		r.log.InfoContext(ctx, "retention deleted what is past it", slog.Int("runs", runs), slog.Int("events", events),
			slog.Int("tombstones", tombstones), slog.Duration("retention", r.retention))
	}
	return nil
}

// RetentionJob is the periodic job of retention, every interval and at start.
func RetentionJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) {
			// Only River's leader inserts it; a second pass at once after a change of
			// leader is harmless (rows locked by one are skipped by the other).
			return RetentionArgs{}, nil
		},
		&river.PeriodicJobOpts{RunOnStart: true, ID: "stepgate.retention"})
}
