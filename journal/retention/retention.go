// Package retention deletes what the journal keeps past its retention (finished runs,
// events, and the tombstones that remember deleted runs), and reads a run's tombstone.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// DeleteExpiredRuns deletes, in one statement, up to batch finished runs (completed,
// failed or cancelled) whose retention has passed since they finished, oldest first: the
// retention of their revision's config (journal.RegisterFunction's retention), else def. Their
// journals, failures, waits, callbacks, messages and streams go with them, and a
// tombstone remembers each (RunTombstoneOf). Runs locked by another transaction (a
// concurrent pass) are skipped. It returns how many it deleted; fewer than batch means
// none is left to delete now.
//
// Triggers that follow it (docs/internals.md): run_usage_on_delete, and stream_usage_on_delete and message_usage_on_delete for the rows its cascade deletes.
func DeleteExpiredRuns(ctx context.Context, db journal.DB, def time.Duration, batch int) (int, error) {
	n, err := dbsqlc.New(db).RetentionDeleteExpiredRuns(ctx, dbsqlc.RetentionDeleteExpiredRunsParams{DefaultMs: def.Milliseconds(), Batch: int64(batch)})
	if err != nil {
		return 0, fmt.Errorf("delete expired runs: %w", err)
	}
	return int(n), nil
}

// DeleteExpiredEvents deletes up to batch events stored more than def ago, oldest
// first, and returns how many.
//
// Triggers that follow it (docs/internals.md): event_usage_on_delete.
func DeleteExpiredEvents(ctx context.Context, db journal.DB, def time.Duration, batch int) (int, error) {
	n, err := dbsqlc.New(db).RetentionDeleteExpiredEvents(ctx, dbsqlc.RetentionDeleteExpiredEventsParams{DefaultMs: def.Milliseconds(), Batch: int64(batch)})
	if err != nil {
		return 0, fmt.Errorf("delete expired events: %w", err)
	}
	return int(n), nil
}

// DeleteExpiredTombstones deletes up to batch tombstones older than def, and returns how
// many: a run deleted that long ago is then simply not found.
func DeleteExpiredTombstones(ctx context.Context, db journal.DB, def time.Duration, batch int) (int, error) {
	n, err := dbsqlc.New(db).RetentionDeleteExpiredTombstones(ctx, dbsqlc.RetentionDeleteExpiredTombstonesParams{DefaultMs: def.Milliseconds(), Batch: int64(batch)})
	if err != nil {
		return 0, fmt.Errorf("delete expired tombstones: %w", err)
	}
	return int(n), nil
}

// RunTombstone says that a run was deleted by retention.
type RunTombstone struct {
	ID         string
	Function   string
	FinishedAt time.Time
	DeletedAt  time.Time
}

// RunTombstoneOf returns the tombstone of the run id of tenant, or journal.ErrNotFound when no
// run of the tenant with that id was deleted (or its tombstone is gone too).
func RunTombstoneOf(ctx context.Context, db journal.DB, tenant, id string) (*RunTombstone, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, journal.ErrNotFound
	}
	row, err := dbsqlc.New(db).RetentionTombstone(ctx, dbsqlc.RetentionTombstoneParams{ID: id, Tenant: tenant})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read tombstone of run %s: %w", id, err)
	}
	return &RunTombstone{ID: row.ID, Function: row.Function, FinishedAt: row.FinishedAt, DeletedAt: row.DeletedAt}, nil
}
