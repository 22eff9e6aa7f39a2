-- name: ClaimRun :one
-- Claims the run when it is due. A wait still stored when its run is claimed has timed
-- out (an event that resumes a run deletes it): journal that, before the journal is
-- read. (The alternatives of a wait_any are rows at one seq: one entry for them.) A
-- claim made deletes the run's River job @backstop_job (0: none) while no worker has it
-- yet, as ClaimRunEarly does. With @slots, for a run of a function with concurrency
-- limits, claim_slots checks that the run is due, under its row lock, and takes its
-- slots (or holds the run, which is then not claimed: ClaimHeld says why).
WITH s AS (SELECT stepgate.claim_slots(@run_id) AS c WHERE @slots::boolean), u AS (
    UPDATE stepgate.run r SET status = 'running', attempts = r.attempts + 1,
        invocation = r.invocation + 1, owner_nonce = NULL, lease_until = now() + make_interval(secs => @lease_seconds),
        wake_at = NULL, awaiting = NULL, held = NULL,
        held_on = CASE WHEN @slots::boolean THEN NULL ELSE r.held_on END,
        slot_stripes = CASE WHEN @slots::boolean THEN (SELECT (s.c).stripes FROM s) ELSE r.slot_stripes END,
        started_at = coalesce(r.started_at, now())
    WHERE r.id = @run_id AND CASE WHEN @slots::boolean THEN (SELECT (s.c).held FROM s) IS NULL ELSE (
        (r.status = 'queued' AND (r.wake_at IS NULL OR r.wake_at <= now())) OR
        (r.status IN ('suspended', 'scheduled') AND r.wake_at <= now())) END
    RETURNING r.id, r.tenant, r.function, r.revision, r.status, r.input, r.output, r.error, r.identity,
        r.idempotency_key, r.parent_id, r.parent_seq, r.parent_name, r.rerun_of, r.cancelled_by, r.detached, r.attempts, r.invocation,
        r.lifetime_failed_invocations, r.failed_invocations, r.lifetime_recoveries, r.recoveries, r.lease_until, r.awaiting,
        CASE WHEN r.wake_at = 'infinity' THEN NULL ELSE r.wake_at END AS wake_at, r.deadline, r.held, r.priority, r.created_at, r.started_at, r.finished_at,
        now() AS db_now
), timed_out AS (
    DELETE FROM stepgate.run_wait w USING u WHERE w.tenant = u.tenant AND w.run_id = u.id
    RETURNING w.tenant, w.run_id, w.seq, stepgate.wait_kind(w.alt, w.kind) AS kind, w.name, w.created_at
), journaled AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
    SELECT DISTINCT ON (t.run_id, t.seq) t.tenant, t.run_id, t.seq, t.kind, t.name, sqlc.arg(timed_out)::jsonb, u.invocation, t.created_at,
        stepgate.journal_bytes_before(t.tenant, t.run_id, t.seq) + octet_length(sqlc.arg(timed_out)::jsonb::text)
    FROM timed_out t CROSS JOIN u
    ON CONFLICT (tenant, run_id, seq) DO NOTHING
), backstop AS (
    DELETE FROM river_job j
    WHERE j.id = sqlc.arg(backstop_job)::bigint AND j.kind = 'stepgate.invoke' AND j.state IN ('scheduled', 'available')
        AND j.args->>'run_id' = sqlc.arg(run_id)::uuid::text AND EXISTS (SELECT 1 FROM u)
)
SELECT u.* FROM u;

-- name: ClaimRunEarly :one
-- ClaimRun ahead of a sleep's end: claims the suspended run whose wake time is still
-- @wake_at and falls within @early_seconds of the database clock, when nothing but that
-- time can resume it (awaiting a sleep, with no wait stored, held by no limit, no
-- concurrency slots to take). It journals nothing: with no wait stored, none has timed
-- out. The claim does not end the sleep: its invocation must not reach the function
-- before the database clock passes @wake_at (Claim.NotBefore, which the invoker waits
-- for); a run handed over or reaped meanwhile is queued until the sleep's end
-- (LeaseRelease, LeaseReapExpired). A claim made deletes the sleep's backstop River job
-- (@backstop_job, 0: none) while no worker has it yet: the claim's lease, whose reaping
-- queues the run again (LeaseReapExpired), and the sweep of stranded runs
-- (RunsStranded) are the backstops from then on.
WITH claimed AS (
    UPDATE stepgate.run r SET status = 'running', attempts = r.attempts + 1,
        invocation = r.invocation + 1, owner_nonce = NULL, lease_until = now() + make_interval(secs => @lease_seconds),
        wake_at = NULL, awaiting = NULL, started_at = coalesce(r.started_at, now())
    WHERE r.tenant = @tenant AND r.id = @run_id AND r.status = 'suspended' AND r.wake_at = @wake_at
        AND r.wake_at <= now() + make_interval(secs => @early_seconds)
        AND r.awaiting->>'kind' = 'sleep' AND r.held IS NULL AND r.slot_keys IS NULL
        AND NOT EXISTS (SELECT 1 FROM stepgate.run_wait w WHERE w.tenant = @tenant AND w.run_id = @run_id)
    RETURNING r.id, r.tenant, r.function, r.revision, r.status, r.input, r.output, r.error, r.identity,
        r.idempotency_key, r.parent_id, r.parent_seq, r.parent_name, r.rerun_of, r.cancelled_by, r.detached, r.attempts, r.invocation,
        r.lifetime_failed_invocations, r.failed_invocations, r.lifetime_recoveries, r.recoveries, r.lease_until, r.awaiting,
        r.wake_at, r.deadline, r.held, r.priority, r.created_at, r.started_at, r.finished_at,
        now() AS db_now
), backstop AS (
    DELETE FROM river_job j
    WHERE j.id = sqlc.arg(backstop_job)::bigint AND j.kind = 'stepgate.invoke' AND j.state IN ('scheduled', 'available')
        AND j.args->>'run_id' = @run_id::text AND EXISTS (SELECT 1 FROM claimed)
)
SELECT * FROM claimed;

-- name: ClockNow :one
-- The database clock now (not the transaction's start): what a claim ahead of a wake
-- time waits on (see ClaimRunEarly).
SELECT clock_timestamp()::timestamptz;

-- name: ClaimJournal :many
-- The run's entries, keyed by its tenant, which the claim in the same batch has locked.
-- With running_only (after a ClaimRun with slots, which may hold the run instead), only when the
-- claim was made.
SELECT e.seq, e.kind, e.name, e.output, e.error, e.attempt, e.wake_at, e.started_at, e.finished_at,
    e.copied_from IS NOT NULL AS copied
FROM stepgate.run r JOIN stepgate.journal_entry e ON e.tenant = r.tenant AND e.run_id = r.id
WHERE r.id = @run_id AND (NOT @running_only::boolean OR r.status = 'running')
ORDER BY e.seq;

-- name: ClaimStepAttempts :many
-- The next attempt of each step that has failed before and has no entry yet; with
-- running_only, as ClaimJournal's.
SELECT f.seq, max(f.attempt) + 1 AS attempt
FROM stepgate.run r JOIN stepgate.attempt_failure f ON f.tenant = r.tenant AND f.run_id = r.id
WHERE r.id = @run_id AND f.seq > 0 AND NOT EXISTS (
    SELECT 1 FROM stepgate.journal_entry e WHERE e.tenant = f.tenant AND e.run_id = f.run_id AND e.seq = f.seq)
    AND (NOT @running_only::boolean OR r.status = 'running')
GROUP BY f.seq;

-- name: ClaimHeld :one
-- Why a ClaimRun with slots did not claim the run: its held, when a limit holds it.
SELECT r.held FROM stepgate.run r WHERE r.id = @run_id AND r.status <> 'running';
