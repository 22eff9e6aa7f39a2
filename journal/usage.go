package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Storage quotas per tenant (docs/schema.md, Tenant usage): a tenant's stored runs, its runs' stream
// bytes, the bytes waiting in its runs' mailboxes and its events' bytes are counted as
// they are written, in the writes' own statements, and each write that would pass the
// tenant's cap is refused with a *QuotaError. Its runs' journal bytes are counted when
// each run finishes (the run_journal_bytes_on_finish trigger), never per checkpoint: a
// start is refused once they reach the cap, which the journals of the tenant's
// unfinished runs may pass, each by at most its own bound (STEPGATE_MAX_JOURNAL_BYTES). Writers in flight at once for one tenant each see the
// committed usage without the others' writes, so a cap can be passed by at most one
// write per transaction in flight for the tenant (each bounded: a run, a stream write
// of at most one request body, a message of at most one request body).

// Quotas are the caps of one tenant's storage. A zero field does not limit.
type Quotas struct {
	MaxRuns         int64 // Stored runs, not yet deleted by retention.
	MaxStreamBytes  int64 // Bytes of the chunks of all its runs' streams.
	MaxMailboxBytes int64 // Bytes of its messages not yet received.
	MaxEventBytes   int64 // Bytes of its events' data, not yet deleted by retention.
	MaxJournalBytes int64 // Bytes of its finished runs' journals, not yet deleted by retention.
}

// TenantUsage is what a tenant stores, as its quotas count it.
type TenantUsage struct {
	Runs         int64 `db:"runs"`
	StreamBytes  int64 `db:"stream_bytes"`
	MailboxBytes int64 `db:"mailbox_bytes"`
	EventBytes   int64 `db:"event_bytes"`
	JournalBytes int64 `db:"journal_bytes"` // Of its finished runs.
}

// ErrQuota wraps every *QuotaError.
var ErrQuota = errors.New("journal: tenant quota exceeded")

// QuotaError is a write refused because its tenant's storage would pass a quota.
type QuotaError struct {
	Message string // Names the quota, its value and its setting.
}

func (e *QuotaError) Error() string { return e.Message }

// Unwrap makes errors.Is(err, ErrQuota) hold.
func (e *QuotaError) Unwrap() error { return ErrQuota }

// TenantUsageOf returns what tenant stores: zero for a tenant that has stored nothing.
func TenantUsageOf(ctx context.Context, db DB, tenant string) (TenantUsage, error) {
	u, err := dbsqlc.New(db).UsageOf(ctx, tenant)
	if err != nil {
		return TenantUsage{}, fmt.Errorf("read usage of tenant %s: %w", tenant, err)
	}
	return TenantUsage{Runs: u.Runs, StreamBytes: u.StreamBytes, MailboxBytes: u.MailboxBytes, EventBytes: u.EventBytes, JournalBytes: u.JournalBytes}, nil
}

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

// FoldUsage folds the usage rows of database connections that have ended into their
// tenants' rows of stripe 0, at most limit rows, and returns how many it folded. Each
// connection counts in a row of its own (stripe: its backend's pid), so that no two
// writers wait for each other's row; folding keeps a tenant's rows about as many as the
// connections writing for it. The sums, and so every quota, do not change.
func FoldUsage(ctx context.Context, db DB, limit int) (int64, error) {
	n, err := dbsqlc.New(db).UsageFold(ctx, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("fold tenant usage: %w", err)
	}
	return n, nil
}
