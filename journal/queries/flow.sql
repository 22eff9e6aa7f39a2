-- name: FlowThrottle :one
-- Takes a place in the key's throttle queue, or nothing (no row) when the start would
-- come more than ahead_us from now.
INSERT INTO stepgate.flow_rate AS f (tenant, function, kind, key, tat)
VALUES (@tenant, @function, 'throttle', @key, now() + sqlc.arg(interval_us)::bigint * interval '1 microsecond')
ON CONFLICT (tenant, function, kind, key) DO UPDATE
    SET tat = greatest(now(), f.tat) + sqlc.arg(interval_us)::bigint * interval '1 microsecond'
    WHERE f.tat - sqlc.arg(tau_us)::bigint * interval '1 microsecond' - now() <= sqlc.arg(ahead_us)::bigint * interval '1 microsecond'
RETURNING greatest(now(), tat - (sqlc.arg(interval_us)::bigint + sqlc.arg(tau_us)::bigint) * interval '1 microsecond')::timestamptz AS start_at,
    now()::timestamptz AS now;

-- name: FlowThrottleRetryAfter :one
SELECT greatest(0, extract(epoch FROM f.tat - now()) * 1e6 - sqlc.arg(tau_us)::bigint - sqlc.arg(ahead_us)::bigint)::bigint AS retry_after_us
FROM stepgate.flow_rate f WHERE f.tenant = @tenant AND f.function = @function AND f.kind = 'throttle' AND f.key = @key;

-- name: FlowTakeRate :execrows
-- Takes one start of the key from its rate limit, or nothing (no row) when the rate
-- does not allow it now.
INSERT INTO stepgate.flow_rate AS f (tenant, function, kind, key, tat)
VALUES (@tenant, @function, 'rate_limit', @key, now() + sqlc.arg(interval_us)::bigint * interval '1 microsecond')
ON CONFLICT (tenant, function, kind, key) DO UPDATE
    SET tat = greatest(now(), f.tat) + sqlc.arg(interval_us)::bigint * interval '1 microsecond'
    WHERE f.tat - sqlc.arg(tau_us)::bigint * interval '1 microsecond' <= now();

-- name: FlowRateRetryAfter :one
SELECT greatest(0, extract(epoch FROM f.tat - now()) * 1e6 - sqlc.arg(tau_us)::bigint)::bigint AS retry_after_us
FROM stepgate.flow_rate f WHERE f.tenant = @tenant AND f.function = @function AND f.kind = 'rate_limit' AND f.key = @key;

-- name: FlowDebounceOpen :one
-- Opens the key's debounce window for run_id, or finds the one open (fresh is false).
INSERT INTO stepgate.flow_debounce AS d (tenant, function, key, run_id, first_at)
VALUES (@tenant, @function, @key, @run_id, now())
ON CONFLICT (tenant, function, key) DO UPDATE SET run_id = d.run_id
RETURNING run_id::text, run_id = sqlc.arg(run_id)::uuid AS fresh, (now() + sqlc.arg(period_us)::bigint * interval '1 microsecond')::timestamptz AS start_at;

-- name: FlowDebounceCollapse :one
-- Collapses a start into the open window's run while it is still scheduled; else
-- reopens the window for new_run_id, and returns no row. The run's wake_at is w.at,
-- never 'infinity': it is read as RunsByID reads it only so that the row has RunsByID's
-- columns and types (see storedRun).
WITH w AS (
    SELECT least(now() + sqlc.arg(period_us)::bigint * interval '1 microsecond', d.first_at + sqlc.arg(max_wait_us)::bigint * interval '1 microsecond') AS at
    FROM stepgate.flow_debounce d WHERE d.tenant = @tenant AND d.function = @function AND d.key = @key
), u AS (
    UPDATE stepgate.run r SET input = @input, identity = @identity, wake_at = w.at,
        held = 'debounced until ' || to_char(w.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
    FROM w
    WHERE r.id = sqlc.arg(run_id)::uuid AND r.tenant = @tenant AND r.status = 'scheduled'
    RETURNING r.*
), reopen AS (
    UPDATE stepgate.flow_debounce d SET run_id = sqlc.arg(new_run_id)::uuid, first_at = now()
    WHERE d.tenant = @tenant AND d.function = @function AND d.key = @key AND NOT EXISTS (SELECT 1 FROM u)
)
SELECT id, tenant, function, revision, status, input, output, error, identity,
    idempotency_key, parent_id, parent_seq, parent_name, rerun_of, cancelled_by, detached, attempts, invocation,
    lifetime_failed_invocations, failed_invocations, lifetime_recoveries, recoveries, lease_until, awaiting,
    CASE WHEN wake_at = 'infinity' THEN NULL ELSE wake_at END AS wake_at, deadline, held, priority, created_at, started_at, finished_at
FROM u;

-- name: FlowCompleteEvent :exec
UPDATE stepgate.event SET runs = runs || sqlc.arg(runs)::uuid[],
    skipped = CASE WHEN sqlc.narg(skipped)::jsonb IS NULL THEN skipped ELSE coalesce(skipped, '[]') || sqlc.narg(skipped)::jsonb END
WHERE tenant = @tenant AND id = @id;

-- name: FlowPrune :one
WITH r AS (
    DELETE FROM stepgate.flow_rate f
    USING (SELECT tenant, function, kind, key FROM stepgate.flow_rate
        WHERE tat < now() - interval '1 minute' LIMIT sqlc.arg(max_rows)::bigint) o
    WHERE (f.tenant, f.function, f.kind, f.key) = (o.tenant, o.function, o.kind, o.key)
        AND f.tat < now() - interval '1 minute'
    RETURNING 1
), d AS (
    DELETE FROM stepgate.flow_debounce f
    USING (SELECT tenant, function, key FROM stepgate.flow_debounce
        WHERE first_at < now() - interval '25 hours' LIMIT sqlc.arg(max_rows)::bigint) o
    WHERE (f.tenant, f.function, f.key) = (o.tenant, o.function, o.key)
        AND f.first_at < now() - interval '25 hours'
    RETURNING 1
), c AS (
    -- Concurrency counters of idle keys: all at 0, nobody in the key's line
    -- (kept at 0 by releases, so that a busy key is not deleted and inserted at
    -- each run); a row in use is skipped, and re-checked under its lock.
    DELETE FROM stepgate.concurrency_slot s
    USING (SELECT tenant, function, key, stripe FROM stepgate.concurrency_slot o
        WHERE running = 0 AND NOT EXISTS (
            -- The whole key is idle: a busy striped key keeps its empty stripes.
            SELECT 1 FROM stepgate.concurrency_slot b
            WHERE b.tenant = o.tenant AND b.function = o.function AND b.key = o.key AND b.running > 0
        ) AND NOT EXISTS (
            SELECT 1 FROM stepgate.run q
            WHERE q.tenant = o.tenant AND q.function = o.function AND q.held_on = o.key
                AND q.status IN ('queued', 'scheduled', 'suspended'))
        LIMIT sqlc.arg(max_rows)::bigint FOR UPDATE SKIP LOCKED) o
    WHERE (s.tenant, s.function, s.key, s.stripe) = (o.tenant, o.function, o.key, o.stripe)
        AND s.running = 0
    RETURNING 1
)
SELECT ((SELECT count(*) FROM r) + (SELECT count(*) FROM d) + (SELECT count(*) FROM c))::bigint AS deleted;

-- name: FlowRefillHeldLines :exec
SELECT stepgate.refill_held_lines(sqlc.arg(max_keys)::int);
