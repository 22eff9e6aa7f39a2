package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DeleteExpiredRuns deletes, in one statement, up to batch finished runs (completed,
// failed or cancelled) whose retention has passed since they finished, oldest first: the
// retention of their revision's config (RegisterFunction's retention), else def. Their
// journals, failures, waits, callbacks, messages and streams go with them, and a
// tombstone remembers each (RunTombstoneOf). Runs locked by another transaction (a
// concurrent pass) are skipped. It returns how many it deleted; fewer than batch means
// none is left to delete now.
func DeleteExpiredRuns(ctx context.Context, db DB, def time.Duration, batch int) (int, error) {
	tag, err := db.Exec(ctx, `
		WITH doomed AS (
			SELECT r.id FROM stepgate.run r
			JOIN stepgate.function_revision f ON f.tenant = r.tenant AND f.name = r.function AND f.revision = r.revision
			WHERE r.finished_at IS NOT NULL AND r.status IN ('completed', 'failed', 'cancelled')
				AND r.finished_at < now() - coalesce(f.retention_ms, $1) * interval '1 millisecond'
			ORDER BY r.finished_at
			LIMIT $2
			FOR UPDATE OF r SKIP LOCKED
		), gone AS (
			DELETE FROM stepgate.run r USING doomed WHERE r.id = doomed.id
			RETURNING r.id, r.tenant, r.function, r.finished_at
		)
		INSERT INTO stepgate.run_tombstone (id, tenant, function, finished_at)
		SELECT id, tenant, function, finished_at FROM gone
		ON CONFLICT (id) DO NOTHING`, def.Milliseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("delete expired runs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// DeleteExpiredEvents deletes up to batch events stored more than def ago, oldest
// first, and returns how many.
func DeleteExpiredEvents(ctx context.Context, db DB, def time.Duration, batch int) (int, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM stepgate.event e USING (
			SELECT tenant, id FROM stepgate.event
			WHERE created_at < now() - $1 * interval '1 millisecond'
			ORDER BY created_at LIMIT $2
		) old
		WHERE e.tenant = old.tenant AND e.id = old.id`, def.Milliseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("delete expired events: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// DeleteExpiredTombstones deletes up to batch tombstones older than def, and returns how
// many: a run deleted that long ago is then simply not found.
func DeleteExpiredTombstones(ctx context.Context, db DB, def time.Duration, batch int) (int, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM stepgate.run_tombstone t USING (
			SELECT id FROM stepgate.run_tombstone
			WHERE deleted_at < now() - $1 * interval '1 millisecond'
			ORDER BY deleted_at LIMIT $2
		) old
		WHERE t.id = old.id`, def.Milliseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("delete expired tombstones: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// RunTombstone says that a run was deleted by retention.
type RunTombstone struct {
	ID         string    `db:"id"`
	Function   string    `db:"function"`
	FinishedAt time.Time `db:"finished_at"`
	DeletedAt  time.Time `db:"deleted_at"`
}

// RunTombstoneOf returns the tombstone of the run id of tenant, or ErrNotFound when no
// run of the tenant with that id was deleted (or its tombstone is gone too).
func RunTombstoneOf(ctx context.Context, db DB, tenant, id string) (*RunTombstone, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, ErrNotFound
	}
	rows, _ := db.Query(ctx, `SELECT id::text, function, finished_at, deleted_at FROM stepgate.run_tombstone WHERE id = $1 AND tenant = $2`, id, tenant)
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[RunTombstone])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read tombstone of run %s: %w", id, err)
	}
	return t, nil
}
