package journal

import (
	"context"
	"fmt"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// growingTables are the tables whose rows the hot statements find by key. Postgres
// caches a statement's generic plan per connection and builds it again only when the
// table is analyzed: a plan made while a table was tiny (a sequential scan, cheaper
// there than its index) would scan the whole table at each call once it has grown, until
// autovacuum's next ANALYZE, which may come minutes later on a fast-growing new database.
var growingTables = []string{"run", "journal_entry"}

// AnalyzeGrown analyzes each of the hot tables that holds more than twice the rows its
// statistics say (and more than 2,000), and returns their names. So the statistics,
// and the plans built on them, are never off by more than that factor: a plan made for a
// tiny table meets at most twice its rows before it is built again. ANALYZE samples at
// most a few tens of thousands of rows, so each costs milliseconds. A table another
// ANALYZE or VACUUM holds (autovacuum's) is skipped (SKIP_LOCKED), as is one the caller
// may not analyze (not its owner: Postgres warns and goes on).
func AnalyzeGrown(ctx context.Context, db DB) ([]string, error) {
	q := dbsqlc.New(db)
	grown, err := q.GrownTables(ctx, growingTables)
	if err != nil {
		return nil, fmt.Errorf("find grown tables: %w", err)
	}
	for _, t := range grown {
		if err := analyze(ctx, q, t); err != nil {
			return nil, fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	return grown, nil
}

// analyze analyzes table t, one of growingTables, with its own named statement.
func analyze(ctx context.Context, q *dbsqlc.Queries, t string) error {
	switch t {
	case "run":
		return q.AnalyzeRun(ctx)
	case "journal_entry":
		return q.AnalyzeJournalEntry(ctx)
	}
	return fmt.Errorf("no ANALYZE statement for table %s", t)
}
