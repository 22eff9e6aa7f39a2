package stats

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// QueueStatsBound bounds the rows QueueStats counts: the queue depth and each River job
// state's count saturate at it, so a scrape costs at most that many index entries per
// count whatever the backlog.
const QueueStatsBound = 10000

// QueueStats is the backlog of the whole deployment, every tenant (read it with the
// system pool).
type QueueStats struct {
	// Due counts the runs due now that no invocation has claimed yet (queued or
	// scheduled runs whose time has come, suspended runs whose wake time has passed), up
	// to QueueStatsBound. OldestAge is how long the one due first has been due; 0 for
	// none.
	Due       int64
	OldestAge time.Duration
	// Jobs counts River's jobs by state, each up to QueueStatsBound.
	Jobs map[string]int64
}

// ReadQueueStats reads QueueStats in one round trip, through the run_due index and
// River's state index.
func ReadQueueStats(ctx context.Context, db journal.DB) (QueueStats, error) {
	q := QueueStats{Jobs: map[string]int64{}}
	b := &pgx.Batch{}
	// Both statements go in one round trip, with their generated SQL.
	b.Queue(dbsqlc.QueueDue, dbsqlc.QueueDueParams{Bound: QueueStatsBound}.Args()...).
		QueryRow(func(r pgx.Row) error {
			var age float64
			if err := r.Scan(&q.Due, &age); err != nil {
				return err
			}
			q.OldestAge = time.Duration(age * float64(time.Second))
			return nil
		})
	b.Queue(dbsqlc.QueueJobs, dbsqlc.QueueJobsParams{Bound: QueueStatsBound}.Args()...).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var state string
				var n int64
				if err := rows.Scan(&state, &n); err != nil {
					return err
				}
				q.Jobs[state] = n
			}
			return rows.Err()
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return q, fmt.Errorf("read queue stats: %w", err)
	}
	return q, nil
}

// RunOwner returns the tenant and function of run id, for the logs of the rare paths
// that know only the id; empty strings when it cannot be read.
func RunOwner(ctx context.Context, db journal.DB, id string) (tenant, function string) {
	row, _ := dbsqlc.New(db).RunOwner(ctx, id)
	return row.Tenant, row.Function
}
