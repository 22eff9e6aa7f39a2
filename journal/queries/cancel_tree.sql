-- name: CancelDescendants :many
-- Cancels at most max_runs unfinished runs below roots (the shallowest first), passing
-- through finished runs and stopping at detached ones. stepgate_run_done is
-- journal.NotifyChannel.
WITH RECURSIVE tree (id, tenant, parent_id, live) AS (
    SELECT r.id, r.tenant, r.parent_id, r.status IN ('scheduled', 'queued', 'running', 'suspended')
    FROM stepgate.run r
    WHERE r.tenant = @tenant AND r.parent_id = ANY (@roots::uuid[]) AND NOT r.detached
    UNION ALL
    SELECT r.id, r.tenant, r.parent_id, r.status IN ('scheduled', 'queued', 'running', 'suspended')
    FROM tree t JOIN stepgate.run r ON r.tenant = t.tenant AND r.parent_id = t.id
    WHERE r.tenant = @tenant AND NOT r.detached
), todo AS (
    SELECT id, tenant, parent_id FROM tree WHERE live LIMIT @max_runs
), u AS (
    UPDATE stepgate.run r SET status = 'cancelled',
        error = jsonb_build_object('type', 'cancelled',
            'message', 'cancelled with its parent run ' || todo.parent_id || ' by ' || (sqlc.arg(by_identity)::jsonb ->> 'subject')),
        lease_until = NULL, wake_at = NULL, awaiting = NULL, finished_at = now(), cancelled_by = sqlc.arg(by_identity)
    FROM todo
    WHERE r.tenant = todo.tenant AND r.id = todo.id AND r.tenant = @tenant AND r.status IN ('scheduled', 'queued', 'running', 'suspended')
    RETURNING r.id, r.tenant, r.notify
), waits AS (
    DELETE FROM stepgate.run_wait w USING u WHERE w.tenant = u.tenant AND w.run_id = u.id
), notified AS (
    SELECT pg_notify('stepgate_run_done', id::text) FROM u WHERE notify
)
SELECT u.id::text FROM u, (SELECT count(*) FROM notified) notified_count;
