// Package usage holds what a tenant stores, as its storage quotas count it, and the
// quotas' caps; the writes check them in the journal, and refuse with a
// *journal.QuotaError.
package usage

import (
	"context"
	"fmt"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

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

// TenantUsageOf returns what tenant stores: zero for a tenant that has stored nothing.
func TenantUsageOf(ctx context.Context, db journal.DB, tenant string) (TenantUsage, error) {
	u, err := dbsqlc.New(db).UsageOf(ctx, tenant)
	if err != nil {
		return TenantUsage{}, fmt.Errorf("read usage of tenant %s: %w", tenant, err)
	}
	return TenantUsage{Runs: u.Runs, StreamBytes: u.StreamBytes, MailboxBytes: u.MailboxBytes, EventBytes: u.EventBytes, JournalBytes: u.JournalBytes}, nil
}

// FoldUsage folds the usage rows of database connections that have ended into their
// tenants' rows of stripe 0, at most limit rows, and returns how many it folded. Each
// connection counts in a row of its own (stripe: its backend's pid), so that no two
// writers wait for each other's row; folding keeps a tenant's rows about as many as the
// connections writing for it. The sums, and so every quota, do not change.
func FoldUsage(ctx context.Context, db journal.DB, limit int) (int64, error) {
	n, err := dbsqlc.New(db).UsageFold(ctx, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("fold tenant usage: %w", err)
	}
	return n, nil
}
