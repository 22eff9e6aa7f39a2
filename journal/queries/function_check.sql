-- name: LiveRunsToCheck :many
-- The live runs of a function that a check replays, at most @sample: runs not ended with
-- at least one journal entry, among the function's 10,000 newest runs not ended; the
-- newest run at each last seq first (one of each place in the journal), then the next
-- newest of each, and so on. live is how many of those 10,000 have a journal, more
-- whether there are more than 10,000 runs not ended.
WITH unended AS (
    SELECT r.id, r.revision, r.created_at,
        (SELECT max(e.seq) FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = r.id) AS last_seq
    FROM stepgate.run r
    WHERE r.tenant = @tenant AND r.function = @function
        AND r.status IN ('scheduled', 'queued', 'running', 'suspended')
    ORDER BY r.created_at DESC, r.id DESC
    LIMIT 10001
), live AS (
    SELECT u.id, u.revision, u.created_at,
        row_number() OVER (PARTITION BY u.last_seq ORDER BY u.created_at DESC, u.id DESC) AS nth,
        count(*) OVER () AS live
    FROM (SELECT * FROM unended LIMIT 10000) u
    WHERE u.last_seq IS NOT NULL
)
SELECT l.id, l.revision, l.live::integer AS live, ((SELECT count(*) FROM unended) > 10000)::boolean AS more
FROM live l
ORDER BY l.nth, l.created_at DESC, l.id DESC
LIMIT @sample;

-- name: PutFunctionCheck :exec
-- Keeps the check of a function the tenant has registered; of another name, nothing.
INSERT INTO stepgate.function_check (tenant, function, checked_at, subject, registered, forced, result)
SELECT @tenant, @function, @checked_at, @subject, @registered, @forced, @result
WHERE EXISTS (SELECT 1 FROM stepgate.function f WHERE f.tenant = @tenant AND f.name = @function)
ON CONFLICT (tenant, function) DO UPDATE SET checked_at = excluded.checked_at, subject = excluded.subject,
    registered = excluded.registered, forced = excluded.forced, result = excluded.result;

-- name: GetFunctionCheck :one
SELECT checked_at, subject, registered, forced, result FROM stepgate.function_check
WHERE tenant = @tenant AND function = @function;

-- name: AppCheckStart :one
-- Takes the check slot of the tenant for a check until ttl_seconds have passed, unless
-- another check holds it and has not expired: then it finds nothing. now is the
-- database clock unless a test sets it.
INSERT INTO stepgate.app_check AS c (tenant, id, subject, app, started_at, expires_at)
SELECT @tenant, @id, @subject, @app, t.now, t.now + make_interval(secs => sqlc.arg(ttl_seconds)::float8)
FROM (SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now) t
ON CONFLICT (tenant) DO UPDATE SET id = excluded.id, subject = excluded.subject, app = excluded.app,
    started_at = excluded.started_at, expires_at = excluded.expires_at
WHERE c.expires_at <= excluded.started_at
RETURNING started_at;

-- name: AppCheckRunning :one
SELECT id, subject, app, started_at FROM stepgate.app_check WHERE tenant = @tenant;

-- name: AppCheckEnd :exec
DELETE FROM stepgate.app_check WHERE tenant = @tenant AND id = @id;
