package journal

import (
	"context"
	"fmt"
)

// HoldBack records that the fair share of a gateway's workers holds back the running
// River job jobID, of run runID: the job's priority becomes priority when that is lower
// (a larger number), so that it goes back to the queue behind the jobs of every tenant
// below its share whatever priority its run has (see package invoker's fairshare.go;
// River never changes a job's priority itself, and the snooze that follows keeps it),
// and a queued or scheduled run's held says why (a claim clears it). One statement.
func HoldBack(ctx context.Context, db DB, jobID int64, runID string, priority int, why string) error {
	if _, err := db.Exec(ctx, `
		WITH job AS (
			UPDATE river_job SET priority = $2 WHERE id = $1 AND state = 'running' AND priority < $2
		)
		UPDATE stepgate.run SET held = $4
		WHERE id = $3 AND status IN ('queued', 'scheduled') AND held IS DISTINCT FROM $4`,
		jobID, priority, runID, why); err != nil {
		return fmt.Errorf("hold back job %d of run %s: %w", jobID, runID, err)
	}
	return nil
}
