-- Cancel trees and bulk cancels.
--
-- A child run started detached (an invoke await with detached: true) is not cancelled
-- with its parent; every other child is, and its children, and so on (journal.CancelRun,
-- journal.CancelDescendants). The walk follows parent_id within a tenant (run_child
-- indexes it).
ALTER TABLE stepgate.run ADD COLUMN detached boolean NOT NULL DEFAULT false;

-- An operation is a long piece of work on many runs of a tenant, done in the background
-- in batches (a River job), whose progress the API reads. Kind cancel: cancel every
-- run of the tenant matching filter (a JSON object, see journal.RunFilter) created
-- before the operation, 1,000 per transaction, with their trees.
CREATE TABLE stepgate.operation (
    id          uuid        PRIMARY KEY,
    tenant      text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('cancel')),
    status      text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed')),
    filter      jsonb       NOT NULL,
    by_identity jsonb       NOT NULL, -- who asked for it
    matched     bigint,               -- runs matching when the work began; NULL before
    cancelled   bigint      NOT NULL DEFAULT 0,
    batches     integer     NOT NULL DEFAULT 0,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
-- One running operation per tenant: a second one is refused (409) until it ends.
CREATE UNIQUE INDEX operation_running ON stepgate.operation (tenant) WHERE status = 'running';
CREATE INDEX operation_tenant ON stepgate.operation (tenant, created_at DESC);

-- Tenant isolation, as migration 0004 sets it up for every table.
GRANT SELECT, INSERT, UPDATE ON stepgate.operation TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.operation ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.operation TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.operation TO stepgate_system USING (true);
