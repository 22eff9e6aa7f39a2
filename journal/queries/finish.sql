-- name: RunFinish :one
-- Finish's update of the run. A failed invocation's retry (queued) is not due before a
-- sleep it was waiting out in its process (the latest wake time of the sleeps among the
-- last 64 entries: a parallel step may be journaled after it): GREATEST ignores the NULL
-- of none. The channel is NotifyChannel. With @step (FinishWithLastStep), it applies
-- only when the entry at seq @step was inserted by this transaction (by the insert
-- before it in the batch); NULL: always.
WITH u AS (
    UPDATE stepgate.run r SET
        status = sqlc.arg(status),
        output = sqlc.arg(output),
        error = sqlc.arg(error),
        lease_until = NULL,
        wake_at = CASE WHEN sqlc.arg(status) IN ('suspended', 'queued') AND sqlc.arg(timed)::boolean
            THEN greatest(coalesce(sqlc.narg(until)::timestamptz, now() + make_interval(secs => sqlc.arg(after_seconds))),
                CASE WHEN sqlc.arg(status) = 'queued' THEN (SELECT max(CASE WHEN t.kind = 'sleep' THEN t.wake_at END) FROM (
                    SELECT e.kind, e.wake_at FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = sqlc.arg(run_id) ORDER BY e.seq DESC LIMIT 64) t) END) END,
        awaiting = sqlc.arg(awaiting),
        finished_at = CASE WHEN sqlc.arg(status) IN ('completed', 'failed', 'cancelled') THEN now() END,
        failed_invocations = CASE WHEN sqlc.arg(status) = 'queued' THEN r.failed_invocations + 1 ELSE 0 END,
        lifetime_failed_invocations = r.lifetime_failed_invocations + CASE WHEN sqlc.arg(failed_call)::boolean THEN 1 ELSE 0 END,
        attempts = r.attempts - CASE WHEN sqlc.arg(uncalled)::boolean THEN 1 ELSE 0 END,
        recoveries = 0,
        notify = r.notify OR (sqlc.arg(notify) AND sqlc.arg(status) IN ('suspended', 'queued'))
    WHERE r.id = sqlc.arg(run_id) AND r.invocation = sqlc.arg(invocation) AND r.status = 'running'
        -- An answered end needs a journal without holes: as many entries as its last seq.
        AND (NOT sqlc.arg(whole)::boolean OR (SELECT count(*) = coalesce(max(c.seq), 0) FROM stepgate.journal_entry c WHERE c.tenant = r.tenant AND c.run_id = sqlc.arg(run_id)))
        AND (sqlc.narg(step)::int IS NULL OR EXISTS (SELECT 1 FROM stepgate.journal_entry j
            WHERE j.tenant = r.tenant AND j.run_id = sqlc.arg(run_id) AND j.seq = sqlc.narg(step)::int AND j.xmin = pg_current_xact_id()::xid))
    RETURNING r.id, r.tenant, r.status, r.attempts, r.wake_at, r.parent_id, r.parent_seq, r.notify, r.identity
), failure AS (
    INSERT INTO stepgate.attempt_failure (tenant, run_id, seq, attempt, name, error)
    SELECT u.tenant, u.id, 0, u.attempts, '', sqlc.arg(error) FROM u WHERE sqlc.arg(status) = 'queued'
    ON CONFLICT DO NOTHING
), notified AS (
    SELECT pg_notify('stepgate_run_done', u.id::text) FROM u
    WHERE u.notify AND u.status IN ('completed', 'failed', 'cancelled')
)
SELECT u.status, u.wake_at, clock_timestamp(), (SELECT count(*) FROM notified),
    CASE WHEN u.parent_seq IS NOT NULL AND u.status IN ('completed', 'failed', 'cancelled')
        AND EXISTS (SELECT 1 FROM stepgate.run p WHERE p.id = u.parent_id AND p.tenant = u.tenant)
        THEN u.parent_id::text END,
    u.tenant, u.identity,
    EXISTS (SELECT 1 FROM stepgate.journal_entry j WHERE j.tenant = u.tenant AND j.run_id = u.id AND j.seq = sqlc.arg(await_seq)),
    sqlc.arg(await_seq) <= sqlc.arg(window_size)::int OR EXISTS (SELECT 1 FROM stepgate.journal_entry j
        WHERE j.tenant = u.tenant AND j.run_id = u.id AND j.seq < sqlc.arg(await_seq) AND j.seq >= sqlc.arg(await_seq) - sqlc.arg(window_size)::int)
FROM u;
