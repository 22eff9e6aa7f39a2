package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// MaxSeriesBuckets bounds the buckets FunctionSeries answers.
const MaxSeriesBuckets = 200

// SeriesBucket is what happened to a tenant's runs in one bucket of time; each event
// counts in the bucket of its own time.
type SeriesBucket struct {
	At        time.Time // the bucket's start
	Started   int64     // runs created in the bucket
	Completed int64     // runs that completed in the bucket
	Failed    int64     // runs that failed in the bucket
	Cancelled int64     // runs cancelled in the bucket
	// P50MS and P95MS are the percentiles of the duration, from first claim to finish,
	// of the runs that completed or failed in the bucket, in milliseconds; nil when none.
	P50MS, P95MS *float64
	// WaitP50MS and WaitP95MS are the percentiles of the wait, from creation to first
	// claim, of the runs first claimed in the bucket, in milliseconds; nil when none.
	WaitP50MS, WaitP95MS *float64
	// QueueDepth counts the runs created and not yet claimed nor finished at the end of
	// the bucket (now, for the last one).
	QueueDepth int64
}

// FunctionSeries returns the runs of one registered function of the tenant (or, with
// function empty, of all of them) in each of the last buckets buckets of length bucket
// (a whole number of seconds dividing a day), oldest first and without gaps: the last
// bucket holds now (database clock), and buckets align on the Unix epoch. It reads, per
// function, the index ranges of the window only, so its cost grows with the runs of the
// window, not with the function's history; the queue depth of each bucket is the queue
// now (run_waiting) less the runs that joined it after the bucket plus those that left
// it, so runs deleted by retention since are not counted (a depth never goes below 0).
// Both statements run in one implicit transaction, so they see the same now.
func FunctionSeries(ctx context.Context, db DB, tenant, function string, bucket time.Duration, buckets int) ([]SeriesBucket, error) {
	if bucket < time.Second || bucket%time.Second != 0 || buckets < 1 || buckets > MaxSeriesBuckets {
		return nil, fmt.Errorf("function series: %d buckets of %s", buckets, bucket)
	}
	var fn *string
	if function != "" {
		fn = &function
	}
	secs := int32(bucket / time.Second)
	var waiting dbsqlc.FunctionSeriesWaitingRow
	var rows []dbsqlc.FunctionSeriesBucketsRow
	b := &pgx.Batch{}
	b.Queue(dbsqlc.FunctionSeriesWaiting, tenant, fn).
		QueryRow(func(r pgx.Row) error { return r.Scan(&waiting.Runs, &waiting.Now) })
	b.Queue(dbsqlc.FunctionSeriesBuckets, tenant, fn, secs, int32(buckets)).
		Query(func(r pgx.Rows) (err error) {
			rows, err = pgx.CollectRows(r, pgx.RowToStructByPos[dbsqlc.FunctionSeriesBucketsRow])
			return err
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("function series: %w", err)
	}

	// time.Truncate aligns on the zero time, a whole number of days before the Unix
	// epoch, as date_bin aligns on the epoch in the statement.
	since := waiting.Now.Truncate(bucket).Add(-time.Duration(buckets-1) * bucket)
	out := make([]SeriesBucket, buckets)
	joined := make([]int64, buckets) // runs that joined the queue, less those that left it
	for i := range out {
		out[i].At = since.Add(time.Duration(i) * bucket)
	}
	for _, r := range rows {
		i := int(r.At.Sub(since) / bucket)
		if i < 0 || i >= buckets {
			continue // an event timed after now: a clock the statement did not read
		}
		o := &out[i]
		var p50, p95 *float64
		if len(r.Ms) == 2 {
			p50, p95 = &r.Ms[0], &r.Ms[1]
		}
		switch r.Kind {
		case "created":
			o.Started = r.Runs
			joined[i] += r.Runs
		case "claimed":
			o.WaitP50MS, o.WaitP95MS = p50, p95
			joined[i] -= r.Runs
		case "finished":
			o.Completed, o.Failed, o.Cancelled = r.Completed, r.Failed, r.Cancelled
			o.P50MS, o.P95MS = p50, p95
			joined[i] -= r.Unclaimed
		}
	}
	depth := waiting.Runs
	for i := buckets - 1; i >= 0; i-- {
		out[i].QueueDepth = max(depth, 0)
		depth -= joined[i]
	}
	return out, nil
}
