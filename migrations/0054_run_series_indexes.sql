-- What GET /v1/functions/{name}/stats and GET /v1/stats/functions/series read
-- (journal/queries/run_series.sql FunctionSeries): each function's runs first claimed,
-- and finished, in a window, by index range, with what the buckets need in the index
-- (index-only scans where the visibility map allows); and the runs created and not yet
-- claimed nor finished (the queue now), a small partial index.
CREATE INDEX run_by_function_started ON stepgate.run (tenant, function, started_at) INCLUDE (created_at)
    WHERE started_at IS NOT NULL;

CREATE INDEX run_by_function_finished ON stepgate.run (tenant, function, finished_at) INCLUDE (status, started_at)
    WHERE finished_at IS NOT NULL;

CREATE INDEX run_waiting ON stepgate.run (tenant, function) WHERE started_at IS NULL AND finished_at IS NULL;
