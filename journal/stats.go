package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FunctionStats sums up the runs of one registered function created in a window.
type FunctionStats struct {
	Name      string `db:"name"`
	Runs      int    `db:"runs"`      // created in the window
	Completed int    `db:"completed"` // of those, completed
	Failed    int    `db:"failed"`    // failed or cancelled
	Running   int    `db:"running"`   // not finished yet
	// P50MS is the median time from creation to finish of the completed and failed
	// runs, in milliseconds (a cancellation says nothing of the function's duration);
	// nil when none.
	P50MS *float64 `db:"p50_ms"`
	// LastRunAt is when the function's newest run was created, in the window or not.
	LastRunAt *time.Time `db:"last_run_at"`
}

// StatsOfFunctions returns the stats of each function the tenant has registered, by
// name, over the runs created in the window before now (database clock). It is one
// query, walking each function's runs of the window by index.
func StatsOfFunctions(ctx context.Context, db DB, tenant string, window time.Duration) ([]FunctionStats, error) {
	rows, _ := db.Query(ctx, `
		SELECT f.name, s.runs, s.completed, s.failed, s.running,
			s.p50_ms, l.last_run_at
		FROM stepgate.function f
		CROSS JOIN LATERAL (
			SELECT count(*) AS runs,
				count(*) FILTER (WHERE r.status = 'completed') AS completed,
				count(*) FILTER (WHERE r.status IN ('failed', 'cancelled')) AS failed,
				count(*) FILTER (WHERE r.status NOT IN ('completed', 'failed', 'cancelled')) AS running,
				percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.created_at) * 1000)
					FILTER (WHERE r.status IN ('completed', 'failed')) AS p50_ms
			FROM stepgate.run r
			WHERE r.tenant = f.tenant AND r.function = f.name
			  AND r.created_at > now() - make_interval(secs => $2)
		) s
		LEFT JOIN LATERAL (
			SELECT r.created_at AS last_run_at FROM stepgate.run r
			WHERE r.tenant = f.tenant AND r.function = f.name
			ORDER BY r.created_at DESC, r.id DESC LIMIT 1
		) l ON true
		WHERE f.tenant = $1
		ORDER BY f.name`, tenant, window.Seconds())
	stats, err := pgx.CollectRows(rows, pgx.RowToStructByName[FunctionStats])
	if err != nil {
		return nil, fmt.Errorf("function stats: %w", err)
	}
	return stats, nil
}
