-- name: RunCreate :one
-- CreateRun's statement. The deadline: LEAST ignores NULLs, so it is the earliest of
-- those that are set. Priority 2 is DefaultPriority. A run of a function with
-- concurrency limits is created claimed when it takes its slots here
-- (stepgate.take_slots, in a subquery that OFFSET 0 keeps from being evaluated twice),
-- else queued, for ClaimRunSlots to claim or hold it; not with an idempotency key, whose
-- INSERT may do nothing. The flow keys are flowKeys; the usage sum is usageSum. A run
-- held by a concurrency limit is due for nobody: its wake_at is 'infinity', read as none
-- (the CASE is nullif(wake_at, 'infinity'), which sqlc would type as a bool).
INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, detached, attempts, invocation, lease_until, started_at,
    wake_at, deadline, held, priority, slot_keys, slot_limits, slot_stripes)
SELECT sqlc.arg(id)::uuid, f.tenant, f.name, f.revision,
    CASE WHEN claim THEN 'running' WHEN sqlc.narg(start_at)::timestamptz IS NOT NULL THEN 'scheduled' ELSE 'queued' END,
    sqlc.arg(input)::jsonb, sqlc.arg(identity)::jsonb,
    sqlc.narg(idempotency_key)::text, sqlc.narg(parent_id)::uuid, sqlc.narg(parent_seq)::int, sqlc.narg(parent_name)::text,
    sqlc.narg(rerun_of)::uuid, sqlc.arg(detached)::boolean,
    CASE WHEN claim THEN 1 ELSE 0 END, CASE WHEN claim THEN 1 ELSE 0 END,
    CASE WHEN claim THEN now() + make_interval(secs => sqlc.arg(lease_seconds)::float8) END,
    CASE WHEN claim THEN now() END,
    sqlc.narg(start_at)::timestamptz,
    LEAST(sqlc.narg(deadline)::timestamptz, now() + r.run_timeout_ms * interval '1 millisecond',
        (SELECT p.deadline FROM stepgate.run p
            WHERE sqlc.narg(parent_seq)::int IS NOT NULL AND NOT sqlc.arg(detached)::boolean AND p.id = sqlc.narg(parent_id)::uuid)),
    sqlc.narg(held)::text,
    coalesce(sqlc.narg(priority)::smallint, (r.config->>'priority')::smallint, 2),
    s.keys, s.limits, CASE WHEN claim THEN (tk.t).stripes END
FROM stepgate.function f
JOIN stepgate.function_revision r USING (tenant, name, revision)
CROSS JOIN LATERAL (
    SELECT CASE WHEN r.config ? 'concurrency' THEN stepgate.slot_keys(r.config, sqlc.arg(input)::jsonb, sqlc.arg(identity)::jsonb) END AS keys,
        CASE WHEN r.config ? 'concurrency' THEN stepgate.slot_limits(r.config) END AS limits
    OFFSET 0) s
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.keys IS NOT NULL AND sqlc.arg(claim)::boolean AND sqlc.narg(idempotency_key)::text IS NULL
        THEN stepgate.take_slots(f.tenant, f.name, s.keys, s.limits, now(), sqlc.arg(id)::uuid, true) END AS t
    OFFSET 0) tk
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.keys IS NULL THEN sqlc.arg(claim)::boolean
        WHEN sqlc.arg(claim)::boolean AND sqlc.narg(idempotency_key)::text IS NULL THEN (tk.t).blocked IS NULL
        ELSE false END AS claim) c
WHERE f.tenant = sqlc.arg(tenant)::text AND f.name = sqlc.arg(function)::text
    AND stepgate.may_invoke(r.config, sqlc.arg(check_roles)::boolean, sqlc.arg(roles)::text[])
    AND (sqlc.arg(flowed)::boolean OR NOT r.config ?| array['throttle', 'rate_limit', 'debounce'])
    AND (sqlc.arg(max_runs)::bigint <= 0
        OR (SELECT coalesce(sum(u.runs), 0) FROM stepgate.tenant_usage u WHERE u.tenant = sqlc.arg(tenant)::text) < sqlc.arg(max_runs)::bigint)
    AND (sqlc.arg(max_journal_bytes)::bigint <= 0
        OR (SELECT coalesce(sum(u.journal_bytes), 0) FROM stepgate.tenant_usage u WHERE u.tenant = sqlc.arg(tenant)::text) < sqlc.arg(max_journal_bytes)::bigint)
ON CONFLICT (tenant, function, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at;

-- name: RunCreateRefused :one
-- Why RunCreate created nothing: the function is unknown (no row), the caller may not
-- invoke it, it has flow control (flowKeys), the key is taken, or the tenant stores its
-- quota of runs (usageSum) or of journal bytes.
SELECT stepgate.may_invoke(r.config, @check_roles, @roles::text[]) AS allowed,
    CASE WHEN jsonb_typeof(r.config->'invoke_roles') = 'array'
        THEN ARRAY(SELECT jsonb_array_elements_text(r.config->'invoke_roles')) END AS invoke_roles,
    CASE WHEN NOT sqlc.arg(flowed)::boolean AND r.config ?| array['throttle', 'rate_limit', 'debounce'] THEN r.config END AS flow_config,
    (SELECT coalesce(sum(u.runs), 0) FROM stepgate.tenant_usage u WHERE u.tenant = @tenant) AS runs,
    (SELECT coalesce(sum(u.journal_bytes), 0) FROM stepgate.tenant_usage u WHERE u.tenant = @tenant)::bigint AS journal_bytes
FROM stepgate.function f
JOIN stepgate.function_revision r USING (tenant, name, revision)
WHERE f.tenant = @tenant AND f.name = @function;

-- name: RunByIdempotencyKey :one
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at,
    input = sqlc.arg(input)::jsonb AS same_input
FROM stepgate.run
WHERE tenant = @tenant AND function = @function AND idempotency_key = @idempotency_key;

-- name: RunGet :one
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM stepgate.run WHERE id = @id AND tenant = @tenant;

-- name: RunDetailJournal :many
-- The run's tenant is checked in each statement of GetRunDetail, not only by RunGet.
-- Each entry holds the journal's bytes up to it, so the page's byte budget is applied
-- here and Postgres sends only the page's entries (and always the first).
SELECT e.seq, e.kind, e.name, e.output, e.error, e.attempt, e.wake_at, e.started_at, e.finished_at,
    e.copied_from IS NOT NULL AS copied
FROM stepgate.journal_entry e
WHERE e.run_id = @run_id AND e.seq > @after AND e.tenant = @tenant
    AND (e.seq = (SELECT min(f.seq) FROM stepgate.journal_entry f WHERE f.tenant = @tenant AND f.run_id = @run_id AND f.seq > @after)
        OR coalesce(e.journal_bytes, 0) - coalesce((
            SELECT p.journal_bytes FROM stepgate.journal_entry p WHERE p.tenant = @tenant AND p.run_id = @run_id AND p.seq = @after), 0) <= sqlc.arg(max_bytes)::bigint)
ORDER BY e.seq LIMIT sqlc.arg(max_entries)::bigint;

-- name: RunLastSeq :one
SELECT max(seq) FROM stepgate.journal_entry WHERE run_id = @run_id AND tenant = @tenant;

-- name: RunDetailFailures :many
-- The latest invocation failures (seq 0), on the first page, and the failures of the
-- entries after the page's start.
SELECT * FROM (
    SELECT f.seq, f.attempt, f.name, f.error, f.created_at FROM stepgate.attempt_failure f
    WHERE f.tenant = @tenant AND f.run_id = @run_id AND f.seq = 0 AND sqlc.arg(after)::int = 0
    ORDER BY f.created_at DESC, f.attempt DESC LIMIT sqlc.arg(max_invocation_failures)::bigint
) invocation
UNION ALL
SELECT f.seq, f.attempt, f.name, f.error, f.created_at FROM stepgate.attempt_failure f
WHERE f.tenant = @tenant AND f.run_id = @run_id AND f.seq > sqlc.arg(after)::int AND f.seq > 0
ORDER BY created_at, seq, attempt;

-- name: RunList :many
-- ListRuns' page: input, output and error are read only with include_io, else NULL,
-- NULL and the error with its message cut to 300 bytes.
SELECT id, tenant, function, revision, status,
    CASE WHEN sqlc.arg(include_io)::boolean THEN input ELSE 'null'::jsonb END AS input,
    CASE WHEN sqlc.arg(include_io)::boolean THEN output END AS output,
    CASE WHEN sqlc.arg(include_io)::boolean OR error IS NULL THEN error ELSE jsonb_set(error, '{message}', to_jsonb(left(error->>'message', 300))) END AS error,
    identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM stepgate.run
WHERE tenant = @tenant
    AND (sqlc.arg(function)::text = '' OR function = sqlc.arg(function)::text)
    AND (sqlc.arg(status)::text = '' OR status = sqlc.arg(status)::text)
    AND (sqlc.narg(created_after)::timestamptz IS NULL OR created_at > sqlc.narg(created_after)::timestamptz)
    AND (sqlc.narg(created_before)::timestamptz IS NULL OR created_at < sqlc.narg(created_before)::timestamptz)
    AND (sqlc.narg(after_created_at)::timestamptz IS NULL OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid))
    AND (sqlc.arg(idempotency_key)::text = '' OR idempotency_key = sqlc.arg(idempotency_key)::text)
    AND (sqlc.arg(error_group)::text = '' OR (status = 'failed' AND stepgate.error_group(function, error) = sqlc.arg(error_group)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_runs)::bigint;

-- name: RunAttach :one
UPDATE stepgate.run SET notify = true
WHERE id = @id AND tenant = @tenant AND NOT notify AND status NOT IN ('completed', 'failed', 'cancelled')
RETURNING id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at;

-- name: RunRevision :one
SELECT tenant, function, revision FROM stepgate.run WHERE id = @id;

-- name: RunCopyBounds :one
-- The last seq of the run to copy, and the seq of its first sleep not over yet.
SELECT (SELECT max(e.seq) FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = r.id) AS last_seq,
    (SELECT min(e.seq) FROM stepgate.journal_entry e
     WHERE e.tenant = r.tenant AND e.run_id = r.id AND e.kind = 'sleep' AND e.wake_at > now()) AS sleeping_seq
FROM stepgate.run r WHERE r.id = @id AND r.tenant = @tenant;

-- name: RunCopyEntries :execrows
-- A rerun is of its run's tenant: the copies keep the entries' tenant. Callbacks are
-- copied one by one, each with a fresh token (RunCopyCallbacks, RunCopyCallback).
INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, error, attempt, wake_at,
    invocation, started_at, finished_at, journal_bytes, copied_from)
SELECT s.tenant, sqlc.arg(to_run)::uuid, s.seq, s.kind, s.name, s.output, s.error, s.attempt, s.wake_at,
    0, s.started_at, s.finished_at, s.journal_bytes, s.run_id
FROM stepgate.journal_entry s WHERE s.tenant = @tenant AND s.run_id = sqlc.arg(from_run)::uuid AND s.seq < sqlc.arg(before)::int
    AND s.kind <> 'callback';

-- name: RunCopyCallbacks :many
-- The callback entries of the tenant's run before seq before, with their callbacks;
-- await_copied: the callback's await is journaled before before too, so a rerun from
-- before replays it. now: the database clock, which a fresh callback's expiry counts from.
SELECT e.seq, e.name, e.output, e.attempt, e.started_at, e.finished_at, e.journal_bytes,
    c.state, c.payload, c.error, c.resolver, c.resolved_by, c.resolved_at, c.expires_at, c.awaited_seq,
    coalesce(c.awaited_seq < sqlc.arg(before)::int AND EXISTS (SELECT 1 FROM stepgate.journal_entry a
        WHERE a.tenant = e.tenant AND a.run_id = e.run_id AND a.seq = c.awaited_seq), false)::boolean AS await_copied,
    now()::timestamptz AS now
FROM stepgate.journal_entry e
LEFT JOIN stepgate.callback c ON c.tenant = e.tenant AND c.run_id = e.run_id AND c.seq = e.seq
WHERE e.tenant = @tenant AND e.run_id = sqlc.arg(from_run)::uuid AND e.kind = 'callback' AND e.seq < sqlc.arg(before)::int
ORDER BY e.seq;

-- name: RunCopyCallback :exec
-- Copies a callback into a rerun's journal: its entry, whose output holds a fresh token
-- sealed, and its callback, stored by that token's hash.
WITH entry AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, attempt, invocation,
        started_at, finished_at, journal_bytes, copied_from)
    VALUES (@tenant, sqlc.arg(to_run)::uuid, @seq, 'callback', @name, @output, @attempt, 0,
        @started_at, @finished_at, @journal_bytes, sqlc.arg(from_run)::uuid)
)
INSERT INTO stepgate.callback (run_id, seq, tenant, name, token_hash, state, payload, error, resolver,
    resolved_by, resolved_at, awaited_seq, expires_at)
VALUES (sqlc.arg(to_run)::uuid, @seq, @tenant, @name, @token_hash, @state, @payload, @error, @resolver,
    @resolved_by, @resolved_at, @awaited_seq, @expires_at);

-- name: RunReruns :many
-- The runs that rerun the tenant's run, oldest first.
SELECT id::text FROM stepgate.run
WHERE tenant = @tenant AND rerun_of = @run_id
ORDER BY created_at, id
LIMIT @max_runs;
