-- name: RunEventWatch :exec
-- Rows that expired an hour ago (a gateway that died) are removed on the way.
WITH pruned AS (
    DELETE FROM stepgate.run_watch WHERE expires_at < now() - interval '1 hour'
)
INSERT INTO stepgate.run_watch (gateway_id, tenant, expires_at)
SELECT @gateway_id, t, now() + make_interval(secs => sqlc.arg(ttl_secs)::float8) FROM unnest(@tenants::text[]) t
ON CONFLICT (gateway_id, tenant) DO UPDATE SET expires_at = excluded.expires_at;

-- name: RunEventUnwatch :exec
DELETE FROM stepgate.run_watch WHERE gateway_id = @gateway_id AND tenant = @tenant;

-- name: RunsByID :many
-- A run held by a concurrency limit is due for nobody: its wake_at is 'infinity', read
-- as none. The CASE is nullif(wake_at, 'infinity'), which sqlc would type as a bool.
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM stepgate.run WHERE id = ANY (@ids::uuid[]);
