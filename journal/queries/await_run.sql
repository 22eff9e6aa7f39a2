-- name: AwaitRunMark :one
-- Marks the awaited run of the tenant, while it has not ended, so that its end wakes its
-- awaiters (the trigger run_end_wakes_awaiters); the update takes its row lock, so an
-- end committed meanwhile is waited for and then seen: marked is false once it ended.
WITH m AS (
    UPDATE stepgate.run t SET awaited = true
    WHERE t.tenant = @tenant AND t.id = sqlc.arg(awaited_run)::uuid AND t.finished_at IS NULL
    RETURNING t.id
)
SELECT EXISTS (SELECT 1 FROM m) AS marked;

-- name: AwaitRunStore :exec
-- With waiting, stores the wait for the awaited run's end (a run_wait row of kind
-- 'await_run', or an alternative alt of a wait_any); else journals the end at once: the
-- awaited run's outcome, not_found when the tenant has no such run, or @refused (a
-- refusal of the run's identity) when given. 'await_run' is KindAwaitRun.
WITH t AS (
    SELECT r.id, r.status, r.output, r.error FROM stepgate.run r
    WHERE r.tenant = @tenant AND r.id = sqlc.arg(awaited_run)::uuid AND r.finished_at IS NOT NULL
), out AS (
    SELECT stepgate.wait_output(sqlc.arg(alt)::smallint, 'await_run', coalesce(sqlc.narg(refused)::jsonb,
        stepgate.run_end_output(sqlc.arg(awaited_run)::uuid, t.status, t.output, t.error))) AS output
    FROM (SELECT 1) one LEFT JOIN t ON true
    WHERE NOT sqlc.arg(waiting)::boolean
), entry AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
    SELECT @tenant, @run_id, @seq, stepgate.wait_kind(sqlc.arg(alt)::smallint, 'await_run'), @name, out.output, @invocation, now(),
        stepgate.journal_bytes_before(@tenant, @run_id, @seq) + octet_length(out.output::text)
    FROM out
)
INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, awaited_run, expires_at)
SELECT @run_id, @seq, sqlc.arg(alt)::smallint, @tenant, @name, 'await_run', sqlc.arg(awaited_run)::uuid, @expires_at
WHERE sqlc.arg(waiting)::boolean;
