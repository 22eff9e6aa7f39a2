-- Events: named JSON payloads a tenant sends, through the API or from a run
-- (step.SendEvent). Each is stored once per (tenant, id), which deduplicates them, with
-- its sender's identity and the runs it started (functions whose config has a trigger
-- with its name), all in the transaction that stores it. Events are immutable.
CREATE TABLE stepgate.event (
    tenant        text        NOT NULL,
    id            text        NOT NULL CHECK (id <> ''),
    name          text        NOT NULL CHECK (name <> ''),
    data          jsonb       NOT NULL,
    -- identity is the sender's: the caller's token, or the run that sent it.
    identity      jsonb       NOT NULL,
    source_run_id uuid,
    -- runs are the runs the event started, written with the event (no foreign key: a
    -- run row is never deleted, and the check would lock each run).
    runs          uuid[]      NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, id)
);
CREATE INDEX event_by_created ON stepgate.event (tenant, created_at DESC, id DESC);

-- Triggers are matched against the functions' current revisions, whose configs are
-- jsonb: config->'triggers' @> '[{"event": "<name>"}]' over the tenant's functions.

-- Tenant isolation, as migration 0004 sets it up for every table: the gateway only
-- reads and inserts events.
GRANT SELECT, INSERT ON stepgate.event TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.event ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.event TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.event TO stepgate_system USING (true);
