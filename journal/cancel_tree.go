package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaxTreeCancel bounds how many descendants one CancelDescendants statement cancels;
// past it, the caller continues in the background (see invoker's CancelTreeArgs).
const MaxTreeCancel = 10_000

// CancelDescendants cancels the tenant's runs that descend from roots (their children,
// their children's children, and so on) and have not finished, at most limit of them
// (the shallowest first), as by: each gets an error of type "cancelled" whose message
// names its parent and by's subject, by as cancelled_by, and loses its waits, like
// CancelRun. A detached child (NewRun.Detached) is not cancelled, nor is anything below
// it. The walk passes through finished runs, so calling it again after a partial pass
// continues where it stopped. A cancelled child's parent is itself cancelled by then
// (or in the caller's transaction), so no outcome is journaled in it.
//
// It returns the ids it cancelled; len(ids) == limit means more may remain.
func CancelDescendants(ctx context.Context, db DB, tenant string, roots []string, by Identity, limit int) ([]string, error) {
	if len(roots) == 0 {
		return nil, nil
	}
	rows, _ := db.Query(ctx, `
		WITH RECURSIVE tree (id, parent_id, live) AS (
			SELECT r.id, r.parent_id, r.status IN ('scheduled', 'queued', 'running', 'suspended')
			FROM stepgate.run r
			WHERE r.tenant = $1 AND r.parent_id = ANY ($2::uuid[]) AND NOT r.detached
			UNION ALL
			SELECT r.id, r.parent_id, r.status IN ('scheduled', 'queued', 'running', 'suspended')
			FROM tree t JOIN stepgate.run r ON r.parent_id = t.id
			WHERE r.tenant = $1 AND NOT r.detached
		), todo AS (
			SELECT id, parent_id FROM tree WHERE live LIMIT $4
		), u AS (
			UPDATE stepgate.run r SET status = 'cancelled',
				error = jsonb_build_object('type', 'cancelled',
					'message', 'cancelled with its parent run ' || todo.parent_id || ' by ' || ($3::jsonb ->> 'subject')),
				lease_until = NULL, wake_at = NULL, awaiting = NULL, finished_at = now(), cancelled_by = $3
			FROM todo
			WHERE r.id = todo.id AND r.tenant = $1 AND r.status IN ('scheduled', 'queued', 'running', 'suspended')
			RETURNING r.id, r.notify
		), waits AS (
			DELETE FROM stepgate.run_wait w USING u WHERE w.run_id = u.id
		), notified AS (
			SELECT pg_notify('`+NotifyChannel+`', id::text) FROM u WHERE notify
		)
		SELECT u.id::text FROM u, (SELECT count(*) FROM notified) notified_count`,
		tenant, roots, by, limit)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("cancel descendants of %d runs: %w", len(roots), err)
	}
	return ids, nil
}

// IsDeadlock reports whether err is Postgres's deadlock_detected: a cancel locks a
// parent before its children, an answer a child before its parent (migration 0019's
// trigger), so the two may meet; Postgres aborts one, which may simply run again.
func IsDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
