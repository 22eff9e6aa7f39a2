-- name: RetentionDeleteExpiredRuns :execrows
WITH doomed AS (
    SELECT r.id, r.tenant FROM stepgate.run r
    JOIN stepgate.function_revision f ON f.tenant = r.tenant AND f.name = r.function AND f.revision = r.revision
    WHERE r.finished_at IS NOT NULL AND r.status IN ('completed', 'failed', 'cancelled')
        AND r.finished_at < now() - coalesce(f.retention_ms, sqlc.arg(default_ms)::bigint) * interval '1 millisecond'
    ORDER BY r.finished_at
    LIMIT sqlc.arg(batch)::bigint
    FOR UPDATE OF r SKIP LOCKED
), gone AS (
    DELETE FROM stepgate.run r USING doomed WHERE r.tenant = doomed.tenant AND r.id = doomed.id
    RETURNING r.id, r.tenant, r.function, r.finished_at
)
INSERT INTO stepgate.run_tombstone (id, tenant, function, finished_at)
SELECT id, tenant, function, finished_at FROM gone
ON CONFLICT (tenant, id) DO NOTHING;

-- name: RetentionDeleteExpiredEvents :execrows
DELETE FROM stepgate.event e USING (
    SELECT tenant, id FROM stepgate.event
    WHERE created_at < now() - sqlc.arg(default_ms)::bigint * interval '1 millisecond'
    ORDER BY created_at LIMIT sqlc.arg(batch)::bigint
) old
WHERE e.tenant = old.tenant AND e.id = old.id;

-- name: RetentionDeleteExpiredTombstones :execrows
DELETE FROM stepgate.run_tombstone t USING (
    SELECT tenant, id FROM stepgate.run_tombstone
    WHERE deleted_at < now() - sqlc.arg(default_ms)::bigint * interval '1 millisecond'
    ORDER BY deleted_at LIMIT sqlc.arg(batch)::bigint
) old
WHERE t.tenant = old.tenant AND t.id = old.id;

-- name: RetentionTombstone :one
SELECT id::text, function, finished_at, deleted_at FROM stepgate.run_tombstone WHERE id = @id AND tenant = @tenant;
