package invoker

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
)

// DefaultRetention is how long finished runs are kept when neither the gateway's
// Config.Retention nor their function's config.retention says otherwise.
const DefaultRetention = 30 * 24 * time.Hour

// RetentionArgs is the periodic job that deletes what retention lets go: finished runs
// past their retention, then old events and tombstones (journal.DeleteExpiredRuns). The
// leader of the River clients inserts it every Config.RetentionInterval.
type RetentionArgs struct{}

// Kind implements river.JobArgs.
func (RetentionArgs) Kind() string { return "stepgate.retention" }

type retentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	inv *Invoker
}

// retentionPass bounds one job's work, so that a backlog (a first start after months)
// is deleted over several passes, none holding a worker for long.
const retentionPass = 30 * time.Second

// Work deletes in batches of Config.RetentionBatch, each its own short transaction
// (rows locked by a concurrent pass are skipped), until nothing is left or the pass's
// time is up.
func (w *retentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	inv := w.inv
	until := time.Now().Add(retentionPass)
	var runs, events, tombstones int
	for _, step := range []struct {
		n   *int
		del func(context.Context, journal.DB, time.Duration, int) (int, error)
	}{
		{&runs, journal.DeleteExpiredRuns},
		{&events, journal.DeleteExpiredEvents},
		{&tombstones, journal.DeleteExpiredTombstones},
	} {
		for time.Now().Before(until) {
			n, err := step.del(ctx, inv.pool, inv.retention, inv.retentionBatch)
			if err != nil {
				return err
			}
			*step.n += n
			if n < inv.retentionBatch {
				break
			}
		}
	}
	if runs+events+tombstones > 0 {
		inv.log.InfoContext(ctx, "retention deleted what is past it", slog.Int("runs", runs), slog.Int("events", events),
			slog.Int("tombstones", tombstones), slog.Duration("retention", inv.retention))
	}
	return nil
}

// retentionJob is the periodic job of retention, every interval and at start.
func retentionJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) {
			return RetentionArgs{}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: interval}}
		},
		&river.PeriodicJobOpts{RunOnStart: true, ID: "stepgate.retention"})
}
