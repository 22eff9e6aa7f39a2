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
