// Package failure holds the journal's dead-letter view: a tenant's failed runs grouped by
// function and error, and the groups dismissed.
package failure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// FailureGroup is a group of a tenant's failed runs in the dead-letter view: those of one
// function whose errors have one type and one message shape (the SQL function
// stepgate.error_message_shape, migration 0053), keyed by Group (stepgate.error_group).
type FailureGroup struct {
	Group         string
	Function      string
	ErrorType     string
	MessageShape  string
	SampleMessage string // The latest run's message, its first 1000 characters.
	Runs          int64
	FirstSeen     time.Time
	LastSeen      time.Time
	SampleRunID   string     // The latest failed run.
	DismissedAt   *time.Time // Set when the group is dismissed (with includeDismissed).
}

// FailureGroups returns up to limit groups of the tenant's runs that failed since since,
// latest failure first, and whether more matched. A dismissed group is left out until
// one of its runs fails after its dismissal, unless includeDismissed.
func FailureGroups(ctx context.Context, db journal.DB, tenant string, since time.Time, limit int, includeDismissed bool) ([]FailureGroup, bool, error) {
	rows, err := dbsqlc.New(db).FailureGroups(ctx, dbsqlc.FailureGroupsParams{
		Tenant: tenant, Since: &since, IncludeDismissed: includeDismissed, MaxGroups: int32(limit + 1),
	})
	if err != nil {
		return nil, false, fmt.Errorf("group failed runs: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]FailureGroup, len(rows))
	for i, r := range rows {
		out[i] = FailureGroup{
			Group: r.ErrorGroup, Function: r.Function, ErrorType: r.ErrorType, MessageShape: r.MessageShape,
			SampleMessage: r.SampleMessage, Runs: r.Runs, FirstSeen: r.FirstSeen, LastSeen: r.LastSeen,
			SampleRunID: r.SampleRunID, DismissedAt: r.DismissedAt,
		}
	}
	return out, more, nil
}

// FailureDismissal is a dismissed group of failures.
type FailureDismissal struct {
	Group       string
	DismissedAt time.Time
	By          journal.Identity
}

// DismissFailures dismisses the tenant's group of failures now, as by (again: moves the
// dismissal to now). It returns journal.ErrNotFound when no run of the tenant failed in the group.
func DismissFailures(ctx context.Context, db journal.DB, tenant, group string, by journal.Identity) (*FailureDismissal, error) {
	row, err := dbsqlc.New(db).FailureDismiss(ctx, dbsqlc.FailureDismissParams{Tenant: tenant, ErrorGroup: group, ByIdentity: by})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("dismiss failures %s: %w", group, err)
	}
	return &FailureDismissal{Group: row.ErrorGroup, DismissedAt: row.DismissedAt, By: row.ByIdentity}, nil
}
