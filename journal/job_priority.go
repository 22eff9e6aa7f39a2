package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// HoldBack records that the fair share of a gateway's workers holds back the running
// River job jobID, of run runID: the job's priority becomes priority when that is lower
// (a larger number), so that it goes back to the queue behind the jobs of every tenant
// below its share whatever priority its run has (see package invoker/internal/fairshare;
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

// RunJob is what the River jobs of a run carry: the run's tenant (in an invoke job's
// args, which fair share reads) and priority (the job's), and its deadline, if any.
type RunJob struct {
	RunID    string
	Tenant   string
	Priority int
	Deadline *time.Time
}

// RunJobs returns the RunJob of each of the runs ids that db sees, in no order, and the
// database clock, in one statement; a run not found is left out (and the clock is zero
// when none is found). The invoker reads them to enqueue runs it names by id only.
func RunJobs(ctx context.Context, db DB, ids []string) ([]RunJob, time.Time, error) {
	if len(ids) == 0 {
		return nil, time.Time{}, nil
	}
	rows, err := dbsqlc.New(db).RunJobs(ctx, ids)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("load %d runs' jobs: %w", len(ids), err)
	}
	jobs := make([]RunJob, len(rows))
	var now time.Time
	for i, r := range rows {
		jobs[i] = RunJob{RunID: r.ID, Tenant: r.Tenant, Priority: int(r.Priority), Deadline: r.Deadline}
		now = r.Now
	}
	return jobs, now, nil
}
