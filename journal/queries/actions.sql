-- name: ActionCancelRun :one
-- stepgate_run_done is journal.NotifyChannel (a test checks it). The CASE is
-- nullif(wake_at, 'infinity') (see RunsByID).
WITH u AS (
    UPDATE stepgate.run r SET status = 'cancelled', error = @error, lease_until = NULL,
        wake_at = NULL, awaiting = NULL, finished_at = now(), cancelled_by = @cancelled_by
    WHERE r.id = @id AND r.tenant = @tenant AND r.status IN ('scheduled', 'queued', 'running', 'suspended')
    RETURNING id, tenant, function, revision, status, input, output, error, identity,
        idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
        lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
        wake_at, deadline, held, priority, created_at, started_at, finished_at, notify
), waits AS (
    DELETE FROM stepgate.run_wait w USING u WHERE w.tenant = u.tenant AND w.run_id = u.id
), notified AS (
    SELECT pg_notify('stepgate_run_done', id::text) FROM u WHERE notify
)
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM u, (SELECT count(*) FROM notified) notified_count;

-- name: ActionExceedDeadline :one
-- stepgate_run_done is journal.NotifyChannel (a test checks it). The CASE is
-- nullif(wake_at, 'infinity') (see RunsByID).
WITH u AS (
    UPDATE stepgate.run SET status = 'failed',
        error = jsonb_build_object('type', @error_type::text, 'message',
            'the run passed its deadline of ' || to_char(deadline AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
        invocation = invocation + 1, owner_nonce = NULL, lease_until = NULL,
        wake_at = NULL, awaiting = NULL, finished_at = now()
    WHERE id = @id AND deadline <= now() AND status IN ('scheduled', 'queued', 'running', 'suspended')
    RETURNING id, tenant, function, revision, status, input, output, error, identity,
        idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
        lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
        wake_at, deadline, held, priority, created_at, started_at, finished_at, notify
), waits AS (
    DELETE FROM stepgate.run_wait w USING u WHERE w.tenant = u.tenant AND w.run_id = u.id
), notified AS (
    SELECT pg_notify('stepgate_run_done', id::text) FROM u WHERE notify
)
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM u, (SELECT count(*) FROM notified) notified_count;

-- name: ActionGetRunByID :one
-- Any tenant's. The CASE is nullif(wake_at, 'infinity') (see RunsByID).
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM stepgate.run WHERE id = @id;

-- name: ActionUpcomingDeadlines :many
-- One row with an empty id and the clock when no deadline is upcoming (the coalesce:
-- sqlc types d.id as never NULL).
WITH c AS (SELECT now()::timestamptz AS now)
SELECT coalesce(d.id::text, '')::text AS id, d.at, c.now FROM c LEFT JOIN LATERAL (
    SELECT id, deadline AS at FROM stepgate.run
    WHERE deadline IS NOT NULL AND status IN ('scheduled', 'queued', 'running', 'suspended')
        AND deadline > @after::timestamptz AND deadline <= c.now + make_interval(secs => sqlc.arg(within_secs)::float8)
    ORDER BY deadline
    LIMIT sqlc.arg(max)::bigint) d ON true;
