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
	// Redriven counts the group's runs that were rerun (a run of the tenant names them
	// in rerun_of), by a redrive or one by one; RedrivenCompleted those of them with a
	// rerun that completed.
	Redriven          int64
	RedrivenCompleted int64
	FirstSeen         time.Time
	LastSeen          time.Time
	SampleRunID       string     // The latest failed run.
	DismissedAt       *time.Time // Set when the group is dismissed (with Query.IncludeDismissed).
}

// Query says which groups FailureGroups returns.
type Query struct {
	Since            time.Time // Runs that failed since then.
	Limit            int       // Groups at most.
	IncludeDismissed bool      // Dismissed groups too (a dismissed group with no failure since is left out).
	// HideRedriven leaves out the groups all of whose runs have a rerun that completed
	// (RedrivenCompleted == Runs): such a group closes itself, until one of its runs
	// fails and has none.
	HideRedriven bool
}

// FailureGroups returns up to q.Limit groups of the tenant's runs that failed since
// q.Since, latest failure first, and whether more matched. A dismissed group is left out
// until one of its runs fails after its dismissal, unless q.IncludeDismissed.
func FailureGroups(ctx context.Context, db journal.DB, tenant string, q Query) ([]FailureGroup, bool, error) {
	rows, err := dbsqlc.New(db).FailureGroups(ctx, dbsqlc.FailureGroupsParams{
		Tenant: tenant, Since: &q.Since, IncludeDismissed: q.IncludeDismissed, HideRedriven: q.HideRedriven,
		MaxGroups: int32(q.Limit + 1),
	})
	if err != nil {
		return nil, false, fmt.Errorf("group failed runs: %w", err)
	}
	more := len(rows) > q.Limit
	if more {
		rows = rows[:q.Limit]
	}
	out := make([]FailureGroup, len(rows))
	for i, r := range rows {
		out[i] = FailureGroup{
			Group: r.ErrorGroup, Function: r.Function, ErrorType: r.ErrorType, MessageShape: r.MessageShape,
			SampleMessage: r.SampleMessage, Runs: r.Runs, Redriven: r.Redriven, RedrivenCompleted: r.RedrivenCompleted,
			FirstSeen: r.FirstSeen, LastSeen: r.LastSeen, SampleRunID: r.SampleRunID, DismissedAt: r.DismissedAt,
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
