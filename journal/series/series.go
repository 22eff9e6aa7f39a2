// Package series holds the journal's time series of a tenant's runs, bucket by bucket
// (started, completed, failed, cancelled, durations and waits), and the sealing of past
// buckets that the series reads instead of the runs.
package series

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// MaxSeriesBuckets bounds the buckets FunctionSeries answers.
const MaxSeriesBuckets = 200

// SealedBucket is the length of the buckets SealSeries seals: FunctionSeries reads the
// sealed ones of a series of such buckets from them instead of from the runs.
const SealedBucket = 15 * time.Minute

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
// With buckets of SealedBucket, the buckets SealSeries sealed for the tenant are read
// from there, so that a day's series reads the runs of its last buckets only; the
// answer is alike (but for runs deleted since they were sealed, which stay counted). It
// takes two round trips: the queue and now, then the buckets, so an event of the last
// bucket in between moves the earlier queue depths by one.
func FunctionSeries(ctx context.Context, db journal.DB, tenant, function string, bucket time.Duration, buckets int) ([]SeriesBucket, error) {
	if bucket < time.Second || bucket%time.Second != 0 || buckets < 1 || buckets > MaxSeriesBuckets {
		return nil, fmt.Errorf("function series: %d buckets of %s", buckets, bucket)
	}
	var fn *string
	if function != "" {
		fn = &function
	}
	// The first statement reads now, and the second reads the runs from then back,
	// with its bounds as parameters: the planner sees how few rows a window reads.
	var now time.Time
	var waiting int64
	var sealedUntil *time.Time
	// sqlc types sealed_until NOT NULL, which it is not before the first seal.
	err := db.QueryRow(ctx, dbsqlc.FunctionSeriesNow, dbsqlc.FunctionSeriesNowParams{Tenant: tenant, Function: fn}.Args()...).
		Scan(&now, &waiting, &sealedUntil)
	if err != nil {
		return nil, fmt.Errorf("function series: %w", err)
	}
	// time.Truncate aligns on the zero time, a whole number of days before the Unix
	// epoch, as date_bin and SeriesSeal align on the epoch.
	since := now.Truncate(bucket).Add(-time.Duration(buckets-1) * bucket)
	rawFrom := since
	if bucket == SealedBucket && sealedUntil != nil && sealedUntil.After(since) {
		rawFrom = *sealedUntil
	}
	rows, err := dbsqlc.New(db).FunctionSeriesBuckets(ctx, dbsqlc.FunctionSeriesBucketsParams{
		Tenant: tenant, Function: fn, BucketSecs: int32(bucket / time.Second), Since: since, RawFrom: rawFrom,
	})
	if err != nil {
		return nil, fmt.Errorf("function series: %w", err)
	}

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
	depth := waiting
	for i := buckets - 1; i >= 0; i-- {
		out[i].QueueDepth = max(depth, 0)
		depth -= joined[i]
	}
	return out, nil
}

// SealSeries seals, for every tenant, the buckets of SealedBucket that ended grace before
// now (database clock) and are not sealed yet, never older than a day, the oldest first
// and no more than most of them; then deletes the sealed buckets no window reads any more. It
// returns how many buckets of stepgate.run_series it wrote, at least one per tenant with
// a registered function and bucket sealed. Run it with a pool that sees every tenant.
// An event committed later than grace after the end of its bucket is not counted.
func SealSeries(ctx context.Context, db journal.DB, grace time.Duration, most int) (int64, error) {
	q := dbsqlc.New(db)
	n, err := q.SeriesSeal(ctx, dbsqlc.SeriesSealParams{GraceSecs: int32(grace / time.Second), MaxBuckets: int32(most)})
	if err != nil {
		return 0, fmt.Errorf("seal series: %w", err)
	}
	if _, err := q.SeriesPrune(ctx); err != nil {
		return n, fmt.Errorf("prune series: %w", err)
	}
	return n, nil
}
