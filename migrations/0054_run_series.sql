-- What GET /v1/functions/{name}/stats and GET /v1/stats/functions/series read
-- (journal/queries/run_series.sql).
--
-- Each function's runs first claimed, and finished, in a window, by index range, with
-- what the buckets need in the index (index-only scans where the visibility map allows);
-- and the runs created and not yet claimed nor finished (the queue now), a small partial
-- index.
CREATE INDEX run_by_function_started ON stepgate.run (tenant, function, started_at) INCLUDE (created_at)
    WHERE started_at IS NOT NULL;

CREATE INDEX run_by_function_finished ON stepgate.run (tenant, function, finished_at) INCLUDE (status, started_at)
    WHERE finished_at IS NOT NULL;

CREATE INDEX run_waiting ON stepgate.run (tenant, function) WHERE started_at IS NULL AND finished_at IS NULL;

-- The day's window in 15-minute buckets, sealed: the periodic job stepgate.series_seal
-- (invoker/internal/maintenance/series.go, journal SeriesSeal) writes each bucket once it
-- has ended (and a grace for late commits), from stepgate.run, and deletes those older
-- than a day and an hour. One row per tenant, function and bucket with any run, and one
-- per tenant (function '': all its functions) and bucket, with runs or not, that says the
-- bucket is sealed for the tenant. Counts as FunctionSeriesBuckets counts them;
-- duration_ms and wait_ms hold {p50, p95} in milliseconds, or nothing.
CREATE TABLE stepgate.run_series (
    tenant text NOT NULL,
    function text NOT NULL,
    at timestamptz NOT NULL,
    started bigint NOT NULL,
    claimed bigint NOT NULL,
    completed bigint NOT NULL,
    failed bigint NOT NULL,
    cancelled bigint NOT NULL,
    unclaimed bigint NOT NULL,
    duration_ms float8[] NOT NULL,
    wait_ms float8[] NOT NULL,
    PRIMARY KEY (tenant, function, at)
);

-- How far the job has sealed, and what it deletes.
CREATE INDEX run_series_sealed ON stepgate.run_series (at) WHERE function = '';

ALTER TABLE stepgate.run_series ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.run_series TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.run_series TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT ON TABLE stepgate.run_series TO stepgate_app;
GRANT SELECT,INSERT,DELETE ON TABLE stepgate.run_series TO stepgate_system;
