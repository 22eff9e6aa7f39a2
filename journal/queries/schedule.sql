-- name: SchedulePut :one
-- Creates the tenant's schedule, or replaces it: the next generation makes the ticks
-- already scheduled for it stale.
INSERT INTO stepgate.schedule AS s (id, tenant, name, function, cron, timezone, input, identity, next_at,
    catchup, catchup_window_ms)
VALUES (@id, @tenant, @name, @function, @cron, @timezone, @input, @identity, @next_at,
    @catchup, @catchup_window_ms)
ON CONFLICT (tenant, name) DO UPDATE SET
    function = excluded.function, cron = excluded.cron, timezone = excluded.timezone,
    input = excluded.input, identity = excluded.identity, next_at = excluded.next_at,
    catchup = excluded.catchup, catchup_window_ms = excluded.catchup_window_ms,
    generation = s.generation + 1, updated_at = now()
RETURNING *;

-- name: ScheduleGet :one
SELECT * FROM stepgate.schedule WHERE tenant = @tenant AND name = @name;

-- name: ScheduleList :many
SELECT * FROM stepgate.schedule WHERE tenant = @tenant ORDER BY name;

-- name: ScheduleDelete :execrows
DELETE FROM stepgate.schedule WHERE tenant = @tenant AND name = @name;

-- name: ScheduleClaimTick :one
-- Locks the schedule for its tick at, waiting for a transaction that holds it.
SELECT sqlc.embed(s), clock_timestamp()::timestamptz AS clock FROM stepgate.schedule s
WHERE id = @id AND generation = @generation AND next_at = @next_at
FOR UPDATE;

-- name: ScheduleTryClaimTick :one
-- Locks the schedule for its tick at, or finds nothing when a transaction holds it.
SELECT sqlc.embed(s), clock_timestamp()::timestamptz AS clock FROM stepgate.schedule s
WHERE id = @id AND generation = @generation AND next_at = @next_at
FOR UPDATE SKIP LOCKED;

-- name: ScheduleOverdueTicks :many
-- The bound is now(), not clock_timestamp(): a volatile bound would not be an index
-- condition.
SELECT id, generation, next_at FROM stepgate.schedule
WHERE next_at < now() - sqlc.arg(late_us)::bigint * interval '1 microsecond'
ORDER BY next_at LIMIT @max_ticks;

-- name: ScheduleAdvance :exec
UPDATE stepgate.schedule SET next_at = @next_at, last_tick_at = @last_tick_at, last_run_id = @last_run_id
WHERE id = @id;

-- name: Clock :one
SELECT clock_timestamp()::timestamptz;
