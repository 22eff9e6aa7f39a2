package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/series"
)

// SeriesArgs is the periodic job that seals the day's charts' buckets
// (series.SealSeries), so that a day's series (GET /v1/functions/{name}/stats?window=1d)
// reads the runs of its last buckets only. The leader of the River clients inserts it
// every SeriesInterval.
type SeriesArgs struct{}

// Kind implements river.JobArgs.
func (SeriesArgs) Kind() string { return "stepgate.series_seal" }

const (
	// SeriesInterval is how often the job runs: a bucket is sealed within that much of
	// SeriesGrace after it ends.
	SeriesInterval = time.Minute
	// SeriesGrace is how long after a bucket ends the job waits before sealing it: the
	// events of transactions still open then (a run created, claimed or finished,
	// timed by its transaction's start) would not be counted.
	SeriesGrace = 2 * time.Minute
	// SeriesPass bounds the buckets one job seals: a first start seals the last day's
	// 96 in a few passes, none holding a worker for long.
	SeriesPass = 16
)

// Series is the River worker of SeriesArgs.
type Series struct {
	river.WorkerDefaults[SeriesArgs]
	db  journal.DB
	log *slog.Logger
}

// NewSeries returns the worker that seals the series' buckets in db, which must see
// every tenant.
func NewSeries(db journal.DB, log *slog.Logger) *Series {
	return &Series{db: db, log: log}
}

// Work seals up to SeriesPass buckets; a sealed bucket is never written again, so two
// passes at once (a change of leader) write each bucket once.
func (w *Series) Work(ctx context.Context, _ *river.Job[SeriesArgs]) error {
	n, err := series.SealSeries(ctx, w.db, SeriesGrace, SeriesPass)
	if err != nil {
		return err
	}
	if n > 0 {
		w.log.DebugContext(ctx, "series sealed", slog.Int64("rows", n))
	}
	return nil
}

// SeriesJob is the periodic job of the series, every SeriesInterval and at start.
func SeriesJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(SeriesInterval),
		func() (river.JobArgs, *river.InsertOpts) { return SeriesArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "stepgate.series_seal"})
}
