-- name: FunctionLockName :exec
-- Serializes registrations of one name until the transaction ends (a batch outside one
-- runs as one implicit transaction).
SELECT pg_advisory_xact_lock(hashtextextended('stepgate.function/' || @tenant::text || '/' || @name::text, 0));

-- name: FunctionRegister :one
-- Run after FunctionLockName, so that its snapshot holds every earlier revision. The
-- retention is config.retention, a duration the caller checked (Postgres reads Go's
-- format).
WITH r AS (
    INSERT INTO stepgate.function_revision (tenant, name, revision, url, config, timeout_ms, run_timeout_ms, retention_ms)
    SELECT @tenant, @name, coalesce(max(revision), 0) + 1, @url, @config, @timeout_ms, nullif(sqlc.arg(run_timeout_ms)::bigint, 0),
        (extract(epoch FROM (sqlc.arg(config)::jsonb->>'retention')::interval) * 1000)::bigint
    FROM stepgate.function_revision WHERE tenant = @tenant AND name = @name
    RETURNING *
), cur AS (
    INSERT INTO stepgate.function (tenant, name, revision)
    SELECT tenant, name, revision FROM r
    ON CONFLICT (tenant, name) DO UPDATE SET revision = excluded.revision
)
SELECT r.tenant, r.name, r.revision, r.url, r.config, r.created_at FROM r;

-- name: FunctionGet :one
SELECT r.tenant, r.name, r.revision, r.url, r.config, r.created_at
FROM stepgate.function f
JOIN stepgate.function_revision r USING (tenant, name, revision)
WHERE f.tenant = @tenant AND f.name = @name;

-- name: FunctionGetRevision :one
SELECT r.tenant, r.name, r.revision, r.url, r.config, r.created_at FROM stepgate.function_revision r
WHERE tenant = @tenant AND name = @name AND revision = @revision;

-- name: FunctionList :many
SELECT r.tenant, r.name, r.revision, r.url, r.config, r.created_at
FROM stepgate.function f
JOIN stepgate.function_revision r USING (tenant, name, revision)
WHERE f.tenant = @tenant ORDER BY f.name;

-- name: FunctionDelete :execrows
DELETE FROM stepgate.function WHERE tenant = @tenant AND name = @name;

-- name: FunctionSync :one
-- Run after FunctionLockName. Registers a new revision, as FunctionRegister, unless the
-- current one has the same url, config (compared as jsonb), timeout_ms and
-- run_timeout_ms: then it returns the current revision and stores nothing. changed says
-- which.
WITH same AS (
    SELECT r.tenant, r.name, r.revision, r.url, r.config, r.created_at
    FROM stepgate.function f
    JOIN stepgate.function_revision r USING (tenant, name, revision)
    WHERE f.tenant = @tenant AND f.name = @name
        AND r.url = @url AND r.config = sqlc.arg(config)::jsonb AND r.timeout_ms = @timeout_ms
        AND r.run_timeout_ms IS NOT DISTINCT FROM nullif(sqlc.arg(run_timeout_ms)::bigint, 0)
), r AS (
    INSERT INTO stepgate.function_revision (tenant, name, revision, url, config, timeout_ms, run_timeout_ms, retention_ms)
    SELECT @tenant, @name, m.next, @url, @config, @timeout_ms, nullif(sqlc.arg(run_timeout_ms)::bigint, 0),
        (extract(epoch FROM (sqlc.arg(config)::jsonb->>'retention')::interval) * 1000)::bigint
    FROM (SELECT coalesce(max(revision), 0) + 1 AS next FROM stepgate.function_revision WHERE tenant = @tenant AND name = @name) m
    WHERE NOT EXISTS (SELECT 1 FROM same)
    RETURNING *
), cur AS (
    INSERT INTO stepgate.function (tenant, name, revision)
    SELECT tenant, name, revision FROM r
    ON CONFLICT (tenant, name) DO UPDATE SET revision = excluded.revision
)
SELECT r.tenant, r.name, r.revision, r.url, r.config, r.created_at, true AS changed FROM r
UNION ALL
SELECT same.tenant, same.name, same.revision, same.url, same.config, same.created_at, false AS changed FROM same;
