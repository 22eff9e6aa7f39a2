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
INSERT INTO stepgate.function_check (tenant, function, checked_at, subject, registered, forced, result)
VALUES (@tenant, @function, @checked_at, @subject, @registered, @forced, @result)
ON CONFLICT (tenant, function) DO UPDATE SET checked_at = excluded.checked_at, subject = excluded.subject,
    registered = excluded.registered, forced = excluded.forced, result = excluded.result;

-- name: GetFunctionCheck :one
SELECT checked_at, subject, registered, forced, result FROM stepgate.function_check
WHERE tenant = @tenant AND function = @function;
