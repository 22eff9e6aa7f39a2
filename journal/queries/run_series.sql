-- name: FunctionSeriesBuckets :many
-- The tenant's runs per bucket of bucket_secs, in the last buckets buckets before now
-- (database clock; the last holds now; buckets align on the Unix epoch), of one
-- registered function or, with function NULL, of all of them: one row per event kind and
-- bucket that has any. Each event is counted in the bucket of its own time, each kind
-- reading one index range per function of the window only: 'created' runs
-- (created_at, run_by_function), 'claimed' runs (first claimed, started_at,
-- run_by_function_started) with the percentiles of their wait from creation, and
-- 'finished' runs (finished_at, run_by_function_finished) with the percentiles of the
-- duration from first claim of those completed or failed. ms holds the two percentiles,
-- p50 and p95, in milliseconds, or none.
WITH fn AS (
    SELECT f.tenant, f.name FROM stepgate.function f
    WHERE f.tenant = @tenant AND (sqlc.narg(function)::text IS NULL OR f.name = sqlc.narg(function)::text)
), span AS (
    SELECT date_bin(make_interval(secs => @bucket_secs::int), now(), timestamptz '1970-01-01 00:00:00+00')
        - make_interval(secs => sqlc.arg(bucket_secs)::int * (sqlc.arg(buckets)::int - 1)) AS since
)
SELECT 'created' AS kind, date_bin(make_interval(secs => @bucket_secs::int), r.created_at, (SELECT since FROM span))::timestamptz AS at,
    count(*) AS runs, 0::bigint AS completed, 0::bigint AS failed, 0::bigint AS cancelled, 0::bigint AS unclaimed,
    '{}'::float8[] AS ms
FROM fn JOIN stepgate.run r ON r.tenant = fn.tenant AND r.function = fn.name
WHERE r.created_at >= (SELECT since FROM span)
GROUP BY 2
UNION ALL
SELECT 'claimed', date_bin(make_interval(secs => @bucket_secs::int), r.started_at, (SELECT since FROM span)),
    count(*), 0, 0, 0, 0,
    percentile_cont('{0.5,0.95}'::float8[]) WITHIN GROUP (ORDER BY extract(epoch FROM r.started_at - r.created_at) * 1000)
FROM fn JOIN stepgate.run r ON r.tenant = fn.tenant AND r.function = fn.name
WHERE r.started_at >= (SELECT since FROM span)
GROUP BY 2
UNION ALL
SELECT 'finished', date_bin(make_interval(secs => @bucket_secs::int), r.finished_at, (SELECT since FROM span)),
    count(*),
    count(*) FILTER (WHERE r.status = 'completed'),
    count(*) FILTER (WHERE r.status = 'failed'),
    count(*) FILTER (WHERE r.status = 'cancelled'),
    count(*) FILTER (WHERE r.started_at IS NULL),
    coalesce(percentile_cont('{0.5,0.95}'::float8[]) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.started_at) * 1000)
        FILTER (WHERE r.status IN ('completed', 'failed') AND r.started_at IS NOT NULL), '{}')
FROM fn JOIN stepgate.run r ON r.tenant = fn.tenant AND r.function = fn.name
WHERE r.finished_at >= (SELECT since FROM span)
GROUP BY 2;

-- name: FunctionSeriesWaiting :one
-- The tenant's runs created and not yet claimed nor finished (the queue, delayed
-- starts included), of one registered function or, with function NULL, of all of them,
-- and the database's now; through the partial index run_waiting. Sent in the batch of
-- FunctionSeriesBuckets, whose now is the same (one transaction).
SELECT count(*) AS runs, now()::timestamptz AS now
FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
WHERE f.tenant = @tenant AND (sqlc.narg(function)::text IS NULL OR f.name = sqlc.narg(function)::text)
    AND r.started_at IS NULL AND r.finished_at IS NULL;
