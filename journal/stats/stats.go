// Package stats holds the journal's counts for dashboards and scrapes: each function's
// runs over a window, and the backlog of the whole deployment (queue depth, River jobs).
package stats

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
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
func StatsOfFunctions(ctx context.Context, db journal.DB, tenant string, window time.Duration) ([]FunctionStats, error) {
	// sqlc types p50_ms and last_run_at NOT NULL (it does not see that an aggregate of
	// no rows, or a LEFT JOIN LATERAL that finds none, is NULL): its generated method
	// would fail on a function without runs, so this scans its statement by name.
	rows, _ := db.Query(ctx, dbsqlc.FunctionStats, dbsqlc.FunctionStatsParams{Tenant: tenant, WindowSecs: window.Seconds()}.Args()...)
	stats, err := pgx.CollectRows(rows, pgx.RowToStructByName[FunctionStats])
	if err != nil {
		return nil, fmt.Errorf("function stats: %w", err)
	}
	return stats, nil
}
