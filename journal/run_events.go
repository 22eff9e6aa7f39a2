package journal

import (
	"context"
	"fmt"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// RunsByID returns the runs with these ids that exist, in no particular order, whatever
// their tenant: the caller filters.
func RunsByID(ctx context.Context, db DB, ids []string) ([]Run, error) {
	rows, err := dbsqlc.New(db).RunsByID(ctx, ids)
	runs := make([]Run, len(rows))
	for i := 0; err == nil && i < len(rows); i++ {
		var run *Run
		if run, err = storedRun(rows[i]); err == nil {
			runs[i] = *run
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load runs: %w", err)
	}
	return runs, nil
}
