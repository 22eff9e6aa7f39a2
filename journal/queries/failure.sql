-- name: FailureGroups :many
-- The tenant's runs that failed since since, grouped by stepgate.error_group (function,
-- error type, error_message_shape of the message), latest failure first; a group dismissed
-- (failure_dismissal) with no failure since is left out, unless include_dismissed. Each
-- group counts its runs that were redriven (a run of the tenant names them in rerun_of) and,
-- of those, the ones with a rerun that completed; with hide_redriven, a group all of whose
-- runs have one is left out. A rerun is made after the run it reruns failed, so one
-- created before since reruns none of them. The sample is the group's latest failed run,
-- its message cut to its first 1000 characters (those its shape reads), so that an answer
-- stays small however long the errors are. One group more than max_groups says more match.
WITH failed AS (
    SELECT r.id, r.finished_at, stepgate.error_group(r.function, r.error) AS error_group
    FROM stepgate.run r
    WHERE r.tenant = @tenant AND r.status = 'failed' AND r.finished_at >= @since
), reruns AS (
    SELECT n.rerun_of AS id, bool_or(n.status = 'completed') AS completed
    FROM stepgate.run n
    WHERE n.tenant = @tenant AND n.rerun_of IS NOT NULL AND n.created_at >= @since
    GROUP BY n.rerun_of
), grouped AS (
    SELECT f.error_group, count(*) AS runs, min(f.finished_at)::timestamptz AS first_seen,
        max(f.finished_at)::timestamptz AS last_seen,
        (array_agg(f.id ORDER BY f.finished_at DESC, f.id DESC))[1]::uuid AS sample_id,
        count(x.id) AS redriven, count(x.id) FILTER (WHERE x.completed) AS redriven_completed
    FROM failed f
    LEFT JOIN reruns x ON x.id = f.id
    GROUP BY f.error_group
)
SELECT g.error_group, g.runs, g.first_seen, g.last_seen, g.sample_id::text AS sample_run_id,
    s.function, coalesce(s.error->>'type', '')::text AS error_type,
    left(coalesce(s.error->>'message', ''), 1000)::text AS sample_message,
    stepgate.error_message_shape(s.error->>'message')::text AS message_shape,
    d.dismissed_at, g.redriven, g.redriven_completed
FROM grouped g
JOIN stepgate.run s ON s.tenant = @tenant AND s.id = g.sample_id
LEFT JOIN stepgate.failure_dismissal d ON d.tenant = @tenant AND d.error_group = g.error_group
WHERE (@include_dismissed::boolean OR d.dismissed_at IS NULL OR g.last_seen > d.dismissed_at)
    AND NOT (@hide_redriven::boolean AND g.redriven_completed = g.runs)
ORDER BY g.last_seen DESC, g.error_group
LIMIT @max_groups;

-- name: FailureDismiss :one
-- Dismisses the tenant's group of failures now, as by_identity; finds nothing when no run
-- of the tenant failed in the group.
INSERT INTO stepgate.failure_dismissal (tenant, error_group, by_identity)
SELECT @tenant, @error_group, @by_identity
WHERE EXISTS (SELECT 1 FROM stepgate.run r WHERE r.tenant = @tenant AND r.status = 'failed'
    AND stepgate.error_group(r.function, r.error) = @error_group)
ON CONFLICT (tenant, error_group) DO UPDATE SET dismissed_at = now(), by_identity = excluded.by_identity
RETURNING error_group, dismissed_at, by_identity;
