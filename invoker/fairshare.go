package invoker

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
)

// Fair share of a gateway's River workers between tenants.
//
// River fetches invoke jobs in priority order, then oldest first, from one queue that
// every tenant shares. Alone, that lets a tenant that queues more slow runs than the
// gateway has workers hold every worker, and another tenant's run waits until they end.
// The fair share bounds each tenant, in this process, with no query: while fewer than
// workers-reserve invoke jobs are in flight, any job is worked; past that (the reserve
// zone), a job is worked only if its tenant holds fewer than its equal share,
// workers / max(2, the tenants with jobs in flight, its own counted), so the last
// reserve workers go to the tenants below their share. A job of a tenant at its share in
// the reserve zone is held back (holdBack): snoozed (river.JobSnooze: not an attempt, the
// run stays queued) at the last priority, and River fetches the next job: another
// tenant's, once the first tenant's queued jobs ahead of it are held back. So:
//   - a tenant alone uses up to workers-reserve workers (or half of them, if more);
//   - a tenant that holds its share or more never takes the reserve, so another tenant's
//     run starts as soon as River fetches it, without waiting for any run to end;
//   - with several tenants busy, each converges on its equal share as runs end, whatever
//     priorities they give their runs (priority orders the fetch, not the share; a held
//     job loses it, so a tenant's backlog of first-priority runs, held back, cannot stay
//     ahead of the others' jobs).
//
// Runs this process wakes with its timers (armTimer: a sleep's end, a resumed wait, a
// child's end, a freed slot) take no River worker but are admitted the same way, and
// counted while they run: a wake that acquire refuses is left to the run's River job,
// which a worker then holds back.
//
// The bound is per gateway: N gateways are N independent pools of workers.

// Snoozes of a job held back by the fair share: fairSnoozeBase doubled at each snooze
// of the job, at most fairSnoozeMax (under River's scheduler interval of 5s, so a
// snoozed job stays available and needs no scheduler pass), with jitter. A tenant's
// backlog is thus fetched ever more rarely while it stays over its share.
const (
	fairSnoozeBase = 250 * time.Millisecond
	fairSnoozeMax  = 4 * time.Second
)

// fairShare counts the invocations in flight in this process from River's invoke jobs
// and its timers, per tenant.
type fairShare struct {
	workers, reserve int

	mu      sync.Mutex
	busy    int
	tenants map[string]int // tenant -> its jobs in flight; only tenants with some
}

// newFairShare returns the fair share of workers with a reserve: reserve < 0 for none,
// 0 for the default, a tenth of the workers rounded up. The reserve is at most
// workers-1, so a tenant alone always gets a worker.
func newFairShare(workers, reserve int) *fairShare {
	switch {
	case reserve < 0:
		reserve = 0
	case reserve == 0:
		reserve = (workers + 9) / 10
	}
	return &fairShare{workers: workers, reserve: max(0, min(reserve, workers-1)), tenants: map[string]int{}}
}

// acquire takes a worker for a job of tenant and returns true, or returns false when
// the gateway is in its reserve zone and tenant holds its share already. A true must
// be followed by release.
func (f *fairShare) acquire(tenant string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.tenants[tenant]
	if f.busy >= f.workers-f.reserve && held >= f.shareLocked(held) {
		return false
	}
	f.busy++
	f.tenants[tenant] = held + 1
	return true
}

// shareLocked is the equal share of a tenant holding held workers: the workers
// divided among the tenants in flight (the tenant among them), counting at least two
// (so a tenant alone leaves the reserve free for the next), and at least 1.
func (f *fairShare) shareLocked(held int) int {
	n := len(f.tenants)
	if held == 0 {
		n++
	}
	return max(1, f.workers/max(2, n))
}

// release gives back a worker that acquire took for tenant.
func (f *fairShare) release(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy--
	if f.tenants[tenant]--; f.tenants[tenant] <= 0 {
		delete(f.tenants, tenant)
	}
}

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
