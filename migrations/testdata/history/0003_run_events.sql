-- Reruns and live run events.

-- rerun_of names the finished run a rerun repeats (same input and identity).
ALTER TABLE stepgate.run ADD COLUMN rerun_of uuid;

-- run_watch holds, per gateway, the tenants it has live event streams open for. Every
-- statement that changes a run's status notifies 'stepgate_run_events' only while a
-- row of the run's tenant has not expired, so runs nobody watches pay one index lookup
-- and no NOTIFY (a NOTIFY serializes commits). A gateway refreshes its rows while its
-- streams stay open and deletes them when the last one closes; the expiry covers a
-- gateway that died.
CREATE TABLE stepgate.run_watch (
    gateway_id text        NOT NULL,
    tenant     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (gateway_id, tenant)
);
CREATE INDEX run_watch_by_tenant ON stepgate.run_watch (tenant, expires_at);

-- Tenant isolation as migration 0004 sets it up for every table. This migration comes
-- before it, so the roles may not exist yet: the check keeps this file working then, and
-- 0004 fences this table along with the others.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stepgate_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON stepgate.run_watch TO stepgate_app;
        ALTER TABLE stepgate.run_watch ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
        CREATE POLICY tenant_isolation ON stepgate.run_watch
            USING (tenant = current_setting('stepgate.tenant', true) OR current_setting('stepgate.tenant', true) = '*');
    END IF;
END $$;
