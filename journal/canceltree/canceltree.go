// Package canceltree cancels a run's descendants: its children, their children, and so
// on, in bounded passes.
package canceltree

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// MaxTreeCancel bounds how many descendants one CancelDescendants statement cancels;
// past it, the caller continues in the background (see invoker's CancelTreeArgs).
const MaxTreeCancel = 10_000

// CancelDescendants cancels the tenant's runs that descend from roots (their children,
// their children's children, and so on) and have not finished, at most limit of them
// (the shallowest first), as by: each gets an error of type "cancelled" whose message
// names its parent and by's subject, by as cancelled_by, and loses its waits, like
// journal.CancelRun. A detached child (journal.NewRun.Detached) is not cancelled, nor is anything below
// it. The walk passes through finished runs, so calling it again after a partial pass
// continues where it stopped. A cancelled child's parent is itself cancelled by then
// (or in the caller's transaction), so no outcome is journaled in it.
//
// It returns the ids it cancelled; len(ids) == limit means more may remain.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots, child_end_wakes_parent, run_journal_bytes_on_finish.
func CancelDescendants(ctx context.Context, db journal.DB, tenant string, roots []string, by journal.Identity, limit int) ([]string, error) {
	if len(roots) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(by)
	if err != nil {
		return nil, fmt.Errorf("cancel descendants of %d runs: %w", len(roots), err)
	}
	ids, err := dbsqlc.New(db).CancelDescendants(ctx, dbsqlc.CancelDescendantsParams{
		Tenant: tenant, Roots: roots, ByIdentity: b, MaxRuns: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("cancel descendants of %d runs: %w", len(roots), err)
	}
	return ids, nil
}

// IsDeadlock reports whether err is Postgres's deadlock_detected: a cancel locks a
// parent before its children, an answer a child before its parent (the trigger child_end_wakes_parent's
// trigger), so the two may meet; Postgres aborts one, which may simply run again.
func IsDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
