package journal

import (
	"context"
	"fmt"
)

// LowerJobPriority sets the priority of the running River job jobID to priority when it
// is higher (a smaller number): a job the fair share holds back goes back to the queue
// behind the jobs of every tenant below its share, whatever priority its run has (see
// package invoker's fairshare.go). River never changes a job's priority itself; the
// snooze that follows keeps it.
func LowerJobPriority(ctx context.Context, db DB, jobID int64, priority int) error {
	if _, err := db.Exec(ctx, `UPDATE river_job SET priority = $2 WHERE id = $1 AND state = 'running' AND priority < $2`,
		jobID, priority); err != nil {
		return fmt.Errorf("lower the priority of job %d: %w", jobID, err)
	}
	return nil
}
