package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
func ReadQueueStats(ctx context.Context, db DB) (QueueStats, error) {
	q := QueueStats{Jobs: map[string]int64{}}
	b := &pgx.Batch{}
	b.Queue(`
		SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(due)), 0)::float8
		FROM (SELECT coalesce(wake_at, created_at) AS due FROM stepgate.run
			WHERE (status IN ('queued', 'scheduled') OR (status = 'suspended' AND wake_at IS NOT NULL))
				AND coalesce(wake_at, created_at) <= clock_timestamp()
			ORDER BY coalesce(wake_at, created_at) LIMIT $1) d`, QueueStatsBound).
		QueryRow(func(r pgx.Row) error {
			var age float64
			if err := r.Scan(&q.Due, &age); err != nil {
				return err
			}
			q.OldestAge = time.Duration(age * float64(time.Second))
			return nil
		})
	b.Queue(`
		SELECT s::text, (SELECT count(*) FROM (SELECT 1 FROM river_job WHERE state = s LIMIT $1) j)
		FROM unnest(enum_range(NULL::river_job_state)) s`, QueueStatsBound).
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
func RunOwner(ctx context.Context, db DB, id string) (tenant, function string) {
	_ = db.QueryRow(ctx, `SELECT tenant, function FROM stepgate.run WHERE id = $1`, id).Scan(&tenant, &function)
	return tenant, function
}
