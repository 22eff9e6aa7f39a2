package journal

import (
	"context"
	"fmt"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// HoldBack records that the fair share of a gateway's workers holds back the running
// River job jobID, of run runID: the job's priority becomes priority when that is lower
// (a larger number), so that it goes back to the queue behind the jobs of every tenant
// below its share whatever priority its run has (see package invoker's fairshare.go;
// River never changes a job's priority itself, and the snooze that follows keeps it),
// and a queued or scheduled run's held says why (a claim clears it). One statement.
func HoldBack(ctx context.Context, db DB, jobID int64, runID string, priority int, why string) error {
	if err := dbsqlc.New(db).HoldBack(ctx, dbsqlc.HoldBackParams{
		JobID: jobID, Priority: int16(priority), RunID: runID, Why: &why,
	}); err != nil {
		return fmt.Errorf("hold back job %d of run %s: %w", jobID, runID, err)
	}
	return nil
}
