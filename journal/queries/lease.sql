-- name: LeaseRenew :many
UPDATE stepgate.run r SET lease_until = now() + make_interval(secs => sqlc.arg(ttl_seconds))
FROM ROWS FROM (unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(invocations)::int[])) AS l(id, invocation)
WHERE r.id = l.id AND r.invocation = l.invocation AND r.status = 'running'
RETURNING r.id::text, r.invocation;

-- name: LeaseReapExpired :many
-- Recovers the running runs whose lease has lapsed, skipping those locked, as
-- recoveries (see recoverRuns). The wake time is that of the sleep among the last 64
-- entries that a function waits out in its process, as RunFinish reads it.
WITH picked AS (
    SELECT x.id, x.tenant FROM stepgate.run x
    WHERE x.lease_until IS NOT NULL AND x.lease_until < now()
    ORDER BY x.lease_until LIMIT sqlc.arg(max_runs)::bigint FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE stepgate.run r SET status = 'queued', lease_until = NULL,
        -- Due now, or when a sleep its invocation was waiting out in its process ends.
        wake_at = (SELECT w FROM (SELECT max(CASE WHEN t.kind = 'sleep' THEN t.wake_at END) FROM (
            SELECT e.kind, e.wake_at FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = r.id ORDER BY e.seq DESC LIMIT 64) t) s(w) WHERE w > now()),
        recoveries = CASE WHEN j.top > r.recovered_seq THEN 1 ELSE r.recoveries + 1 END,
        lifetime_recoveries = r.lifetime_recoveries + 1,
        recovered_seq = j.top
    FROM picked p, LATERAL (
        SELECT coalesce(max(e.seq), 0) AS top FROM stepgate.journal_entry e WHERE e.tenant = p.tenant AND e.run_id = p.id) j
    WHERE r.tenant = p.tenant AND r.id = p.id
    RETURNING r.id, r.tenant, r.function, r.status, r.attempts, r.wake_at, r.finished_at
)
SELECT u.id::text FROM u;

-- name: LeaseRelease :many
-- Recovers the running runs that the leases still own, as LeaseReapExpired does.
WITH picked AS (
    SELECT x.id, x.tenant FROM stepgate.run x
    JOIN ROWS FROM (unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(invocations)::int[])) AS l(id, invocation)
        ON x.id = l.id AND x.invocation = l.invocation
    WHERE x.status = 'running'
    FOR UPDATE OF x
), u AS (
    UPDATE stepgate.run r SET status = 'queued', lease_until = NULL,
        -- Due now, or when a sleep its invocation was waiting out in its process ends.
        wake_at = (SELECT w FROM (SELECT max(CASE WHEN t.kind = 'sleep' THEN t.wake_at END) FROM (
            SELECT e.kind, e.wake_at FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = r.id ORDER BY e.seq DESC LIMIT 64) t) s(w) WHERE w > now()),
        recoveries = CASE WHEN j.top > r.recovered_seq THEN 1 ELSE r.recoveries + 1 END,
        lifetime_recoveries = r.lifetime_recoveries + 1,
        recovered_seq = j.top
    FROM picked p, LATERAL (
        SELECT coalesce(max(e.seq), 0) AS top FROM stepgate.journal_entry e WHERE e.tenant = p.tenant AND e.run_id = p.id) j
    WHERE r.tenant = p.tenant AND r.id = p.id
    RETURNING r.id, r.tenant, r.function, r.status, r.attempts, r.wake_at, r.finished_at
)
SELECT u.id::text FROM u;

-- name: RunsStranded :many
-- Runs due for longer than grace with no live job of kind 'stepgate.invoke'
-- (InvokeJobKind) to invoke them; see StrandedRuns. A job scheduled for later than the
-- run's due time and the grace (a wait's timeout, when another transaction made the run
-- due and no gateway heard of it) does not count.
WITH due AS (
    SELECT d.id FROM stepgate.run d
    WHERE (d.status IN ('queued', 'scheduled') OR (d.status = 'suspended' AND d.wake_at IS NOT NULL))
        AND coalesce(d.wake_at, d.created_at) < now() - make_interval(secs => sqlc.arg(grace_seconds))
    ORDER BY coalesce(d.wake_at, d.created_at)
    LIMIT sqlc.arg(examine)::bigint
)
SELECT r.id::text FROM stepgate.run r JOIN due USING (id)
WHERE (r.status IN ('queued', 'scheduled') OR (r.status = 'suspended' AND r.wake_at IS NOT NULL))
    AND NOT EXISTS (
        SELECT 1 FROM river_job j
        WHERE j.kind = 'stepgate.invoke' AND j.args->>'run_id' = r.id::text AND (
            j.state = 'available'
            OR (j.state = 'running' AND j.attempted_at > now() - make_interval(secs => sqlc.arg(grace_seconds)))
            OR (j.state IN ('scheduled', 'retryable') AND j.scheduled_at > now() - make_interval(secs => sqlc.arg(grace_seconds))
                AND j.scheduled_at <= coalesce(r.wake_at, r.created_at) + make_interval(secs => sqlc.arg(grace_seconds)))))
LIMIT sqlc.arg(max_runs)::bigint
FOR UPDATE OF r SKIP LOCKED;

-- name: RunsUpcomingWakes :many
WITH c AS (SELECT now() AS now)
SELECT w.id, w.at, c.now FROM c LEFT JOIN LATERAL (
    SELECT x.id::text AS id, x.wake_at AS at FROM stepgate.run x
    WHERE (x.status IN ('queued', 'scheduled') OR (x.status = 'suspended' AND x.wake_at IS NOT NULL))
        AND coalesce(x.wake_at, x.created_at) > greatest(sqlc.arg(after)::timestamptz, c.now)
        AND coalesce(x.wake_at, x.created_at) <= c.now + make_interval(secs => sqlc.arg(within_seconds))
        AND x.wake_at IS NOT NULL
    ORDER BY coalesce(x.wake_at, x.created_at)
    LIMIT sqlc.arg(max_runs)::bigint) w ON true;
