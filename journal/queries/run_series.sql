-- name: FunctionSeriesBuckets :many
-- The tenant's runs per bucket of bucket_secs from since (a bucket boundary), of one
-- registered function or, with function NULL, of all of them: one row per event kind and
-- bucket that has any. Each event is counted in the bucket of its own time, each kind
-- reading one index range per function from raw_from only: 'created' runs (created_at,
-- run_by_function), 'claimed' runs (first claimed, started_at, run_by_function_started)
-- with the percentiles of their wait from creation, and 'finished' runs (finished_at,
-- run_by_function_finished) with the percentiles of the duration from first claim of
-- those completed or failed. ms holds the two percentiles, p50 and p95, in milliseconds,
-- or none. The 15-minute buckets from since to raw_from come from stepgate.run_series
-- (SeriesSeal), as the same three rows: raw_from is since but for a day's window, whose
-- buckets sealed for the tenant (FunctionSeriesNow) are not read from the runs again.
-- since and raw_from are parameters, not now(), so that the planner sees how much of
-- each index the statement reads.
SELECT 'created' AS kind, date_bin(make_interval(secs => @bucket_secs::int), r.created_at, @since::timestamptz)::timestamptz AS at,
    count(*) AS runs, 0::bigint AS completed, 0::bigint AS failed, 0::bigint AS cancelled, 0::bigint AS unclaimed,
    '{}'::float8[] AS ms
FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
WHERE f.tenant = @tenant AND (sqlc.narg(function)::text IS NULL OR f.name = sqlc.narg(function)::text)
    AND r.created_at >= @raw_from::timestamptz
GROUP BY 2
UNION ALL
SELECT 'claimed', date_bin(make_interval(secs => @bucket_secs::int), r.started_at, @since::timestamptz),
    count(*), 0, 0, 0, 0,
    percentile_cont('{0.5,0.95}'::float8[]) WITHIN GROUP (ORDER BY extract(epoch FROM r.started_at - r.created_at) * 1000)
FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
WHERE f.tenant = @tenant AND (sqlc.narg(function)::text IS NULL OR f.name = sqlc.narg(function)::text)
    AND r.started_at >= @raw_from::timestamptz
GROUP BY 2
UNION ALL
SELECT 'finished', date_bin(make_interval(secs => @bucket_secs::int), r.finished_at, @since::timestamptz),
    count(*),
    count(*) FILTER (WHERE r.status = 'completed'),
    count(*) FILTER (WHERE r.status = 'failed'),
    count(*) FILTER (WHERE r.status = 'cancelled'),
    count(*) FILTER (WHERE r.started_at IS NULL),
    coalesce(percentile_cont('{0.5,0.95}'::float8[]) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.started_at) * 1000)
        FILTER (WHERE r.status IN ('completed', 'failed') AND r.started_at IS NOT NULL), '{}')
FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
WHERE f.tenant = @tenant AND (sqlc.narg(function)::text IS NULL OR f.name = sqlc.narg(function)::text)
    AND r.finished_at >= @raw_from::timestamptz
GROUP BY 2
UNION ALL
SELECT v.kind, s.at, v.runs, v.completed, v.failed, v.cancelled, v.unclaimed, v.ms
FROM stepgate.run_series s CROSS JOIN LATERAL (VALUES
    ('created', s.started, 0::bigint, 0::bigint, 0::bigint, 0::bigint, '{}'::float8[]),
    ('claimed', s.claimed, 0, 0, 0, 0, s.wait_ms),
    ('finished', s.completed + s.failed + s.cancelled, s.completed, s.failed, s.cancelled, s.unclaimed, s.duration_ms)
) v (kind, runs, completed, failed, cancelled, unclaimed, ms)
WHERE s.tenant = @tenant AND s.function = coalesce(sqlc.narg(function)::text, '')
    AND s.at >= @since::timestamptz AND s.at < @raw_from::timestamptz;

-- name: FunctionSeriesNow :one
-- The database's now; the tenant's runs created and not yet claimed nor finished (the
-- queue, delayed starts included), of one registered function or, with function NULL,
-- of all of them, through the partial index run_waiting; and the end of the last bucket
-- SeriesSeal sealed for the tenant (NULL for none).
SELECT now()::timestamptz AS now,
    (SELECT count(*) FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
        WHERE f.tenant = @tenant AND (sqlc.narg(function)::text IS NULL OR f.name = sqlc.narg(function)::text)
            AND r.started_at IS NULL AND r.finished_at IS NULL) AS waiting,
    (SELECT max(s.at) + interval '15 minutes' FROM stepgate.run_series s
        WHERE s.tenant = @tenant AND s.function = '')::timestamptz AS sealed_until;

-- name: SeriesSeal :execrows
-- Seals into stepgate.run_series the 15-minute buckets that ended grace_secs before now
-- and are not sealed yet, never older than a day, at most max_buckets of them from the
-- oldest: per tenant and function with any run in a bucket, and per tenant with a
-- registered function (function '': all of them), what FunctionSeriesBuckets counts.
-- A bucket is sealed for every tenant at once, so the newest '' row says how far the
-- job has gone (run_series_sealed). An event committed later than grace_secs after its
-- bucket ended is not counted.
WITH edge AS (
    SELECT date_bin(interval '15 minutes', now() - make_interval(secs => @grace_secs::int), timestamptz '1970-01-01 00:00:00+00') AS ended
), bounds AS (
    SELECT f.from_at, least(e.ended, f.from_at + interval '15 minutes' * sqlc.arg(max_buckets)::int) AS to_at
    FROM edge e CROSS JOIN LATERAL (
        SELECT greatest(e.ended - interval '1 day',
            (SELECT max(s.at) + interval '15 minutes' FROM stepgate.run_series s WHERE s.function = '')) AS from_at
    ) f
), created AS (
    SELECT x.tenant, coalesce(x.function, '') AS function, x.at, count(*) AS n
    FROM (
        SELECT r.tenant, r.function, date_bin(interval '15 minutes', r.created_at, timestamptz '1970-01-01 00:00:00+00') AS at
        FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
        WHERE r.created_at >= (SELECT from_at FROM bounds) AND r.created_at < (SELECT to_at FROM bounds)
    ) x
    GROUP BY GROUPING SETS ((x.tenant, x.function, x.at), (x.tenant, x.at))
), claimed AS (
    SELECT x.tenant, coalesce(x.function, '') AS function, x.at, count(*) AS n,
        percentile_cont('{0.5,0.95}'::float8[]) WITHIN GROUP (ORDER BY x.ms) AS ms
    FROM (
        SELECT r.tenant, r.function, date_bin(interval '15 minutes', r.started_at, timestamptz '1970-01-01 00:00:00+00') AS at,
            extract(epoch FROM r.started_at - r.created_at) * 1000 AS ms
        FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
        WHERE r.started_at >= (SELECT from_at FROM bounds) AND r.started_at < (SELECT to_at FROM bounds)
    ) x
    GROUP BY GROUPING SETS ((x.tenant, x.function, x.at), (x.tenant, x.at))
), finished AS (
    SELECT x.tenant, coalesce(x.function, '') AS function, x.at,
        count(*) FILTER (WHERE x.status = 'completed') AS completed,
        count(*) FILTER (WHERE x.status = 'failed') AS failed,
        count(*) FILTER (WHERE x.status = 'cancelled') AS cancelled,
        count(*) FILTER (WHERE x.unclaimed) AS unclaimed,
        percentile_cont('{0.5,0.95}'::float8[]) WITHIN GROUP (ORDER BY x.ms) FILTER (WHERE x.status IN ('completed', 'failed') AND NOT x.unclaimed) AS ms
    FROM (
        SELECT r.tenant, r.function, r.status, r.started_at IS NULL AS unclaimed,
            date_bin(interval '15 minutes', r.finished_at, timestamptz '1970-01-01 00:00:00+00') AS at,
            extract(epoch FROM r.finished_at - r.started_at) * 1000 AS ms
        FROM stepgate.function f JOIN stepgate.run r ON r.tenant = f.tenant AND r.function = f.name
        WHERE r.finished_at >= (SELECT from_at FROM bounds) AND r.finished_at < (SELECT to_at FROM bounds)
    ) x
    GROUP BY GROUPING SETS ((x.tenant, x.function, x.at), (x.tenant, x.at))
), keys AS (
    SELECT c.tenant, c.function, c.at FROM created c
    UNION SELECT k.tenant, k.function, k.at FROM claimed k
    UNION SELECT d.tenant, d.function, d.at FROM finished d
    UNION SELECT DISTINCT f.tenant, '', g.at FROM stepgate.function f
        CROSS JOIN generate_series((SELECT from_at FROM bounds), (SELECT to_at FROM bounds) - interval '15 minutes', interval '15 minutes') g (at)
)
INSERT INTO stepgate.run_series (tenant, function, at, started, claimed, completed, failed, cancelled, unclaimed, duration_ms, wait_ms)
SELECT k.tenant, k.function, k.at, coalesce(c.n, 0), coalesce(l.n, 0), coalesce(d.completed, 0), coalesce(d.failed, 0),
    coalesce(d.cancelled, 0), coalesce(d.unclaimed, 0), coalesce(d.ms, '{}'), coalesce(l.ms, '{}')
FROM keys k
LEFT JOIN created c ON c.tenant = k.tenant AND c.function = k.function AND c.at = k.at
LEFT JOIN claimed l ON l.tenant = k.tenant AND l.function = k.function AND l.at = k.at
LEFT JOIN finished d ON d.tenant = k.tenant AND d.function = k.function AND d.at = k.at
ON CONFLICT (tenant, function, at) DO NOTHING;

-- name: SeriesPrune :execrows
-- Deletes the sealed buckets older than a day and an hour: no window reads them.
DELETE FROM stepgate.run_series WHERE at < now() - interval '25 hours';
