-- name: FunctionStats :many
-- Each of the tenant's functions, with its runs created in the window before now and
-- the creation time of its newest run. p50_ms and last_run_at may be NULL, which sqlc
-- does not see: StatsOfFunctions scans the rows itself.
SELECT f.name, s.runs, s.completed, s.failed, s.running,
    s.p50_ms, l.last_run_at
FROM stepgate.function f
CROSS JOIN LATERAL (
    SELECT count(*) AS runs,
        count(*) FILTER (WHERE r.status = 'completed') AS completed,
        count(*) FILTER (WHERE r.status IN ('failed', 'cancelled')) AS failed,
        count(*) FILTER (WHERE r.status NOT IN ('completed', 'failed', 'cancelled')) AS running,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.created_at) * 1000)
            FILTER (WHERE r.status IN ('completed', 'failed')) AS p50_ms
    FROM stepgate.run r
    WHERE r.tenant = f.tenant AND r.function = f.name
      AND r.created_at > now() - make_interval(secs => @window_secs)
) s
LEFT JOIN LATERAL (
    SELECT r.created_at AS last_run_at FROM stepgate.run r
    WHERE r.tenant = f.tenant AND r.function = f.name
    ORDER BY r.created_at DESC, r.id DESC LIMIT 1
) l ON true
WHERE f.tenant = @tenant
ORDER BY f.name;

-- name: QueueDue :one
-- Counts the runs due now that no invocation has claimed, up to bound, and how many
-- seconds the one due first has been due.
SELECT count(*) AS due, coalesce(extract(epoch FROM clock_timestamp() - min(due)), 0)::float8 AS oldest_secs
FROM (SELECT coalesce(wake_at, created_at) AS due FROM stepgate.run
    WHERE (status IN ('queued', 'scheduled') OR (status = 'suspended' AND wake_at IS NOT NULL))
        AND coalesce(wake_at, created_at) <= clock_timestamp()
    ORDER BY coalesce(wake_at, created_at) LIMIT @bound) d;

-- name: QueueJobs :many
-- River's jobs by state, each count up to bound.
SELECT s::text AS state, (SELECT count(*) FROM (SELECT 1 FROM river_job WHERE state = s LIMIT @bound) j) AS jobs
FROM unnest(enum_range(NULL::river_job_state)) s;

-- name: RunOwner :one
SELECT tenant, function FROM stepgate.run WHERE id = @id;

-- name: GrownTables :many
-- Those of tables that hold more than twice the rows their statistics say (and more
-- than 2,000).
SELECT c.relname::text FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = 'stepgate' AND c.relname = ANY(sqlc.arg(tables)::name[])
    AND s.n_live_tup > 2 * greatest(c.reltuples, 1000);

-- name: AnalyzeRun :exec
ANALYZE (SKIP_LOCKED) stepgate.run;

-- name: AnalyzeJournalEntry :exec
ANALYZE (SKIP_LOCKED) stepgate.journal_entry;
