package invoker

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
)

// The tenants' fair share (which invocation may take a worker) is package
// invoker/internal/fairshare; a River job it refuses is held back here.

// Snoozes of a job held back by the fair share: fairSnoozeBase doubled at each snooze
// of the job, at most fairSnoozeMax (under River's scheduler interval of 5s, so a
// snoozed job stays available and needs no scheduler pass), with jitter. A tenant's
// backlog is thus fetched ever more rarely while it stays over its share.
const (
	fairSnoozeBase = 250 * time.Millisecond
	fairSnoozeMax  = 4 * time.Second
)

// holdBack puts back in the queue a job whose tenant holds its share while the gateway
// is in its reserve zone: snoozed (not an attempt; the run stays queued), at the last
// priority, so River fetches the jobs of the other tenants first, whatever priority the
// held tenant gives its runs. The first time a job is held back (or River snoozed it
// before for another reason while its priority was not the last), one statement lowers
// its priority and sets its run's held (journal.HoldBack); a job that cannot be lowered
// (the database is down) is snoozed anyway.
func (inv *Invoker) holdBack(ctx context.Context, job *river.Job[InvokeArgs]) error {
	snoozes := snoozesOf(job.Metadata)
	if snoozes == 0 || job.Priority < journal.MaxPriority { // once per job, as a rule
		if err := journal.HoldBack(ctx, inv.pool, job.ID, job.Args.RunID, journal.MaxPriority, heldForShare); err != nil {
			inv.log.Warn("a job held back by the fair share keeps its priority", slog.Int64("job_id", job.ID), slog.Any("error", err))
		}
	}
	return river.JobSnooze(snoozeFor(snoozes))
}

// heldForShare is the held of a run whose job the fair share holds back.
const heldForShare = "waiting for a worker: its tenant holds its fair share of the gateway's workers"

// snoozesOf returns how many times River snoozed a job: its metadata's "snoozes".
func snoozesOf(metadata []byte) int {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(metadata, &m) // no metadata: none
	return m.Snoozes
}

// snoozeFor is how long to snooze a job held back that was snoozed snoozes times
// before (see fairSnoozeBase).
func snoozeFor(snoozes int) time.Duration {
	d := fairSnoozeBase
	for i := 0; i < snoozes && d < fairSnoozeMax; i++ {
		d *= 2
	}
	d = min(d, fairSnoozeMax)
	return d - d/4 + rand.N(d/4+1) // 75% to 100%: backlogs do not come back in step
}
