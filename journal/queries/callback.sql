-- name: CallbackRunTenant :one
SELECT tenant, now()::timestamptz AS now FROM stepgate.run WHERE id = @run_id;

-- name: CallbackCreate :exec
INSERT INTO stepgate.callback (run_id, seq, tenant, name, token_hash, expires_at)
VALUES (@run_id, @seq, @tenant, @name, @token_hash, @expires_at);

-- name: CallbackEntry :one
-- The entry at seq, as journal.Entry reads it (entryColumns).
SELECT e.seq, e.kind, e.name, e.output, e.error, e.attempt, e.wake_at, e.started_at, e.finished_at,
    (e.copied_from IS NOT NULL)::boolean AS copied
FROM stepgate.run r JOIN stepgate.journal_entry e ON e.tenant = r.tenant AND e.run_id = r.id
WHERE r.id = @run_id AND e.seq = @seq;

-- name: CallbackLockForAwait :one
-- Its result is set once it is resolved or rejected.
SELECT state,
    (CASE WHEN state <> 'pending' THEN stepgate.callback_result(state, payload, error, resolver, resolved_by, resolved_at) END)::jsonb AS result,
    expires_at, expires_at <= now() AS expired
FROM stepgate.callback WHERE tenant = @tenant AND run_id = @run_id AND seq = @seq FOR UPDATE;

-- name: CallbackJournalAwait :exec
-- The await's entry, of kind await_callback (journal.KindAwaitCallback), or wrapped for a
-- wait_any's alternative alt.
INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes, tenant)
VALUES (@run_id, @seq, stepgate.wait_kind(@alt, 'await_callback'), @name,
    stepgate.wait_output(@alt, 'await_callback', sqlc.arg(output)::jsonb),
    @invocation, now(), stepgate.journal_bytes_before(@tenant, @run_id, @seq) + octet_length(sqlc.arg(output)::jsonb::text), @tenant);

-- name: CallbackMarkAwaited :exec
UPDATE stepgate.callback SET awaited_seq = sqlc.arg(awaited_seq)::int WHERE tenant = @tenant AND run_id = @run_id AND seq = @seq;

-- name: CallbackTimeWait :one
UPDATE stepgate.run SET wake_at = @wake_at WHERE id = @run_id RETURNING wake_at, clock_timestamp()::timestamptz AS clock;

-- name: CallbackStoreWait :exec
WITH waiting AS (
    INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, callback_seq, expires_at)
    VALUES (@run_id, @seq, @alt, @tenant, @name, 'await_callback', @callback_seq, @expires_at)
)
UPDATE stepgate.callback c SET awaited_seq = sqlc.arg(seq)::int, expires_at = @expires_at
WHERE c.tenant = @tenant AND c.run_id = @run_id AND c.seq = @callback_seq;

-- name: CallbackByToken :one
SELECT run_id::text, seq FROM stepgate.callback WHERE token_hash = @token_hash;

-- name: CallbackMayResolve :one
-- may_resume: whether identity may resolve the run's callbacks by name, or list them,
-- as it may resume the run by an event or a message (stepgate.may_resume).
SELECT r.function, fr.config, stepgate.may_resume(fr.config, sqlc.arg(identity)::jsonb) AS may_resume
FROM stepgate.run r
JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
WHERE r.id = @run_id AND r.tenant = @tenant;

-- name: CallbackByName :one
-- The latest callback of that name.
SELECT run_id::text, seq FROM stepgate.callback WHERE tenant = @tenant AND run_id = @run_id AND name = @name
ORDER BY seq DESC LIMIT 1;

-- name: CallbackLockRun :one
SELECT status, tenant, function FROM stepgate.run WHERE id = @run_id FOR UPDATE;

-- name: CallbackLock :one
-- waiting: the run waits for it (its await_callback's wait is stored).
SELECT c.run_id::text AS run_id, c.seq, c.name, c.state, c.resolver, c.resolved_by, c.resolved_at, c.expires_at, c.awaited_seq,
    c.expires_at <= now() AS expired,
    EXISTS (SELECT 1 FROM stepgate.run_wait w WHERE w.tenant = c.tenant AND w.run_id = c.run_id AND w.seq = c.awaited_seq
        AND w.kind = 'await_callback' AND w.callback_seq = c.seq) AS waiting
FROM stepgate.callback c WHERE c.tenant = @tenant AND c.run_id = @run_id AND c.seq = @seq FOR UPDATE;

-- name: CallbackResolve :one
UPDATE stepgate.callback SET state = @state, payload = @payload, error = @error, resolver = @resolver,
    resolved_by = @resolved_by, resolved_at = now()
WHERE tenant = @tenant AND run_id = @run_id AND seq = @seq
RETURNING state, resolver, resolved_by, resolved_at;

-- name: CallbackResume :one
-- Journals the callback's resolution at the run's wait for it, deletes the wait and
-- makes the run due; woken says whether the run waited.
WITH gone_all AS (
    -- With the callback's wait go the other alternatives of a wait_any.
    DELETE FROM stepgate.run_wait w WHERE w.tenant = @tenant AND w.run_id = @run_id AND w.seq = @awaited_seq
    RETURNING w.seq, w.alt, w.name, w.kind, w.callback_seq
), gone AS (
    SELECT seq, alt, name FROM gone_all WHERE kind = 'await_callback' AND callback_seq = sqlc.arg(seq)::int
), woken AS (
    UPDATE stepgate.run SET wake_at = now() WHERE id = @run_id AND tenant = @tenant AND status = 'suspended' AND EXISTS (SELECT 1 FROM gone)
    RETURNING id, tenant, invocation
), out AS (
    SELECT stepgate.callback_result(c.state, c.payload, c.error, c.resolver, c.resolved_by, c.resolved_at) AS output
    FROM stepgate.callback c WHERE c.tenant = @tenant AND c.run_id = @run_id AND c.seq = @seq
), entry AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
    SELECT woken.tenant, woken.id, gone.seq, stepgate.wait_kind(gone.alt, 'await_callback'), gone.name,
        stepgate.wait_output(gone.alt, 'await_callback', out.output), woken.invocation, now(),
        stepgate.journal_bytes_before(woken.tenant, woken.id, gone.seq) + octet_length(out.output::text)
    FROM woken, gone, out
    ON CONFLICT (tenant, run_id, seq) DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM woken) AS woken;

-- name: CallbackKeyLoad :one
SELECT secret FROM stepgate.callback_key;

-- name: CallbackListOpen :many
-- The callbacks of a run of tenant that a POST to their URL would resolve now (pending,
-- not expired, the run not finished), oldest first, each with its journal entry's
-- output (its token sealed, see journal.CallbackKey); awaited: the run waits for it.
SELECT c.seq, c.name, c.expires_at, e.output,
    EXISTS (SELECT 1 FROM stepgate.run_wait w WHERE w.tenant = c.tenant AND w.run_id = c.run_id AND w.seq = c.awaited_seq
        AND w.kind = 'await_callback' AND w.callback_seq = c.seq) AS awaited
FROM stepgate.run r
JOIN stepgate.callback c ON c.tenant = r.tenant AND c.run_id = r.id
JOIN stepgate.journal_entry e ON e.tenant = c.tenant AND e.run_id = c.run_id AND e.seq = c.seq
WHERE r.tenant = @tenant AND r.id = @run_id AND r.status NOT IN ('completed', 'failed', 'cancelled')
    AND c.state = 'pending' AND c.expires_at > now()
ORDER BY c.seq
LIMIT sqlc.arg(max_rows)::int;
