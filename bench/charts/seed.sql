-- Seeds 1,000,000 runs of tenant t1 (functions f1, f2) spread over the last day, and
-- 200,000 runs of ten other tenants, for measuring FunctionSeries (CHARTS_NOTES.md).
-- psql -v ON_ERROR_STOP=1 -f seed.sql DBURL
BEGIN;
INSERT INTO stepgate.function_revision (tenant, name, revision, url, timeout_ms)
SELECT t, f, 1, 'http://127.0.0.1:1/' || f, 30000
FROM unnest(array['t1','t2','t3','t4','t5','t6','t7','t8','t9','t10','t11']) t, unnest(array['f1','f2']) f;
INSERT INTO stepgate.function (tenant, name, revision)
SELECT tenant, name, 1 FROM stepgate.function_revision;
ALTER TABLE stepgate.run DISABLE TRIGGER run_event_on_insert;
INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity,
    created_at, started_at, finished_at, lease_until)
SELECT gen_random_uuid(), tenant, function, 1, status, '{}', '{}', created_at,
    CASE WHEN status IN ('queued') THEN NULL ELSE created_at + wait END,
    CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN created_at + wait + dur END,
    CASE WHEN status = 'running' THEN now() + interval '1 minute' END
FROM (
    SELECT CASE WHEN i <= 1000000 THEN 't1' ELSE 't' || (2 + i % 10) END AS tenant,
        'f' || (1 + i % 2) AS function,
        now() - interval '1 day' * random() AS created_at,
        interval '1 ms' * (random() * random() * 5000) AS wait,
        interval '1 ms' * (50 + random() * random() * 20000) AS dur,
        random() AS p
    FROM generate_series(1, 1200000) i
) s, LATERAL (SELECT CASE
    WHEN s.created_at + s.wait + s.dur > now() THEN (CASE WHEN s.created_at + s.wait > now() THEN 'queued' ELSE 'running' END)
    WHEN s.p < 0.90 THEN 'completed' WHEN s.p < 0.97 THEN 'failed' ELSE 'cancelled' END AS status) st;
ALTER TABLE stepgate.run ENABLE TRIGGER run_event_on_insert;
COMMIT;
VACUUM ANALYZE stepgate.run;
SELECT tenant, status, count(*) FROM stepgate.run GROUP BY 1, 2 ORDER BY 1, 2;
