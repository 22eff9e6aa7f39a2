package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// PartitionsAhead is how many months after the current one CreateJournalPartitions
// makes partitions for, so that a month's runs never wait for theirs.
const PartitionsAhead = 2

// CreateJournalPartitions makes the month partitions of journal_entry and
// attempt_failure (docs/schema.md#partitions) for the month of at (UTC) and the
// PartitionsAhead months after it, where missing, and returns how many it made. Rows of
// those months that the DEFAULT partition caught move into them. It waits 100 ms at
// most for its locks (the journal's writers queue behind it meanwhile), then fails: a
// later call retries.
func CreateJournalPartitions(ctx context.Context, db DB, at time.Time) (int, error) {
	n, err := dbsqlc.New(db).CreateJournalPartitions(ctx, dbsqlc.CreateJournalPartitionsParams{At: at, Ahead: PartitionsAhead})
	if err != nil {
		return 0, fmt.Errorf("create journal partitions: %w", err)
	}
	return int(n), nil
}
