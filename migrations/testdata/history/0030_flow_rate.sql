-- Throttles, rate limits and debounce (a function's config.throttle, config.rate_limit
-- and config.debounce; invoker/flow.go). Their state is a row per (tenant, function,
-- key value), updated in the transaction that starts the run, so the rate holds however
-- many gateways start runs: concurrent starts of one key serialize on its row lock.

-- flow_rate is the GCRA state of a throttle (kind 'throttle') or a rate limit (kind
-- 'rate_limit'): tat, the theoretical arrival time, is when the key's bucket is empty
-- again. A row whose tat has passed is the same as no row.
CREATE TABLE stepgate.flow_rate (
    tenant   text        NOT NULL,
    function text        NOT NULL,
    kind     text        NOT NULL CHECK (kind IN ('throttle', 'rate_limit')),
    key      text        NOT NULL, -- the key's value ('' for a global limit)
    tat      timestamptz NOT NULL,
    PRIMARY KEY (tenant, function, kind, key)
);
-- Rows whose tat has passed are deleted in batches (journal.PruneFlow).
CREATE INDEX flow_rate_by_tat ON stepgate.flow_rate (tat);

-- flow_debounce is a debounce's open window per key: the scheduled run that further
-- starts collapse into, and when the window opened (its max_wait counts from there).
CREATE TABLE stepgate.flow_debounce (
    tenant   text        NOT NULL,
    function text        NOT NULL,
    key      text        NOT NULL,
    run_id   uuid        NOT NULL,
    first_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, function, key)
);
CREATE INDEX flow_debounce_by_first ON stepgate.flow_debounce (first_at);

-- skipped lists the functions an event's triggers did not start, with why (a rate
-- limit): [{"function": ..., "reason": ...}]. NULL when none was skipped.
ALTER TABLE stepgate.event ADD COLUMN skipped jsonb;

-- Tenant isolation, as migration 0004 sets it up for every table. An event's runs and
-- skipped are completed in the transaction that stores it, when flow control starts
-- (or skips) some of its runs.
GRANT UPDATE (runs, skipped) ON stepgate.event TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT, UPDATE, DELETE ON stepgate.flow_rate, stepgate.flow_debounce TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.flow_rate ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.flow_debounce ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.flow_rate TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.flow_rate TO stepgate_system USING (true);
CREATE POLICY tenant_isolation ON stepgate.flow_debounce TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.flow_debounce TO stepgate_system USING (true);
