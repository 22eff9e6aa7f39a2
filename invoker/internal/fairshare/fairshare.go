// Package fairshare is the tenants' fair share of a gateway's River workers.
//
// River fetches invoke jobs in priority order, then oldest first, from one queue that
// every tenant shares. Alone, that lets a tenant that queues more slow runs than the
// gateway has workers hold every worker, and another tenant's run waits until they end.
// The fair share bounds each tenant, in this process, with no query: while fewer than
// workers-reserve invocations are in flight, any is admitted; past that (the reserve
// zone), one is admitted only if its tenant holds fewer than its equal share,
// workers / max(2, the tenants with invocations in flight, its own counted), so the last
// reserve workers go to the tenants below their share. A job of a tenant at its share in
// the reserve zone is held back by the caller (package invoker's holdBack): snoozed
// (river.JobSnooze: not an attempt, the run stays queued) at the last priority, and River
// fetches the next job: another tenant's, once the first tenant's queued jobs ahead of it
// are held back. So:
//   - a tenant alone uses up to workers-reserve workers (or half of them, if more);
//   - a tenant that holds its share or more never takes the reserve, so another tenant's
//     run starts as soon as River fetches it, without waiting for any run to end;
//   - with several tenants busy, each converges on its equal share as runs end, whatever
//     priorities they give their runs (priority orders the fetch, not the share; a held
//     job loses it, so a tenant's backlog of first-priority runs, held back, cannot stay
//     ahead of the others' jobs).
//
// Runs the invoker wakes with its timers (armTimer: a sleep's end, a resumed wait, a
// child's end, a freed slot) take no River worker but are admitted the same way, and
// counted while they run: a wake that Acquire refuses is left to the run's River job,
// which a worker then holds back.
//
// The bound is per gateway: N gateways are N independent pools of workers.
package fairshare

import "sync"

// Share counts the invocations in flight in this process, from River's invoke jobs and
// the invoker's timers, per tenant, and admits or refuses the next one.
//
// Its guarantee: below the reserve zone (fewer than workers-reserve invocations in
// flight) every Acquire succeeds; in it, Acquire refuses a tenant that holds its equal
// share or more, workers / max(2, the tenants in flight, its own counted), and at least
// 1. So the reserve, the last reserve workers, is for the tenants below their share: a
// tenant alone holds at most workers-reserve workers, or half of them if that is more.
// The counts are this process's only: each Acquire that returns true is counted until
// its Release.
//
// A Share is safe for concurrent use. Acquire and Release take one mutex, make no query,
// and allocate nothing but the growth of the map of tenants.
type Share struct {
	workers, reserve int

	mu      sync.Mutex
	busy    int
	tenants map[string]int // tenant -> its invocations in flight; only tenants with some
}

// New returns the fair share of workers with a reserve: reserve < 0 for none, 0 for the
// default, a tenth of the workers rounded up. The reserve is at most workers-1, so a
// tenant alone always gets a worker.
func New(workers, reserve int) *Share {
	switch {
	case reserve < 0:
		reserve = 0
	case reserve == 0:
		reserve = (workers + 9) / 10
	}
	return &Share{workers: workers, reserve: max(0, min(reserve, workers-1)), tenants: map[string]int{}}
}

// Workers is the number of workers shared.
func (f *Share) Workers() int { return f.workers }

// Reserve is the number of workers kept for the tenants below their share.
func (f *Share) Reserve() int { return f.reserve }

// Acquire takes a worker for an invocation of tenant and returns true, or returns false
// when the gateway is in its reserve zone and tenant holds its share already. A true
// must be followed by Release.
func (f *Share) Acquire(tenant string) bool {
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
func (f *Share) shareLocked(held int) int {
	n := len(f.tenants)
	if held == 0 {
		n++
	}
	return max(1, f.workers/max(2, n))
}

// Release gives back a worker that Acquire took for tenant.
func (f *Share) Release(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy--
	if f.tenants[tenant]--; f.tenants[tenant] <= 0 {
		delete(f.tenants, tenant)
	}
}
