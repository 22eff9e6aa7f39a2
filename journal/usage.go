package journal

import (
	"errors"
	"fmt"
)

// Storage quotas per tenant (docs/schema.md, Tenant usage; their caps, usage.Quotas,
// and what a tenant stores, usage.TenantUsageOf, are journal/usage's): a tenant's
// stored runs, its runs' stream bytes, the bytes waiting in its runs' mailboxes and its events' bytes are counted as
// they are written, in the writes' own statements, and each write that would pass the
// tenant's cap is refused with a *QuotaError. Its runs' journal bytes are counted when
// each run finishes (the run_journal_bytes_on_finish trigger), never per checkpoint: a
// start is refused once they reach the cap, which the journals of the tenant's
// unfinished runs may pass, each by at most its own bound (STEPGATE_MAX_JOURNAL_BYTES). Writers in flight at once for one tenant each see the
// committed usage without the others' writes, so a cap can be passed by at most one
// write per transaction in flight for the tenant (each bounded: a run, a stream write
// of at most one request body, a message of at most one request body).

// ErrQuota wraps every *QuotaError.
var ErrQuota = errors.New("journal: tenant quota exceeded")

// QuotaError is a write refused because its tenant's storage would pass a quota.
type QuotaError struct {
	Message string // Names the quota, its value and its setting.
}

func (e *QuotaError) Error() string { return e.Message }

// Unwrap makes errors.Is(err, ErrQuota) hold.
func (e *QuotaError) Unwrap() error { return ErrQuota }

func journalQuotaError(tenant string, bytes, max int64) *QuotaError {
	return &QuotaError{Message: fmt.Sprintf(
		"the finished runs of tenant %s hold %d bytes of journal, its limit of %d (STEPGATE_MAX_TENANT_JOURNAL_BYTES); no run starts until retention deletes some",
		tenant, bytes, max)}
}

func runsQuotaError(tenant string, runs, max int64) *QuotaError {
	return &QuotaError{Message: fmt.Sprintf(
		"tenant %s stores %d runs, its limit of %d (STEPGATE_MAX_TENANT_RUNS); runs are deleted by retention once finished",
		tenant, runs, max)}
}
