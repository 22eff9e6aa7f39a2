-- Retention: finished runs are deleted once they are older than their retention, in
-- small batches (journal.DeleteExpiredRuns, from a periodic River job), so that storage
-- stays bounded. A run's retention is its revision's config.retention (retention_ms),
-- else the gateway's default (STEPGATE_RETENTION, 30 days). A deleted run's journal,
-- failures, waits, callbacks, messages and streams go with it (ON DELETE CASCADE); a
-- tombstone says it was deleted, so that reading it later is a 404 that says why. Old
-- events and tombstones go after the default retention.
ALTER TABLE stepgate.function_revision ADD COLUMN retention_ms bigint CHECK (retention_ms > 0);

-- The finished runs, oldest first: a pass reads the old end of it.
CREATE INDEX run_by_finished ON stepgate.run (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX event_by_age ON stepgate.event (created_at);

ALTER TABLE stepgate.stream DROP CONSTRAINT stream_run_id_fkey,
    ADD CONSTRAINT stream_run_id_fkey FOREIGN KEY (run_id) REFERENCES stepgate.run (id) ON DELETE CASCADE;
ALTER TABLE stepgate.stream_chunk DROP CONSTRAINT stream_chunk_run_id_key_fkey,
    ADD CONSTRAINT stream_chunk_run_id_key_fkey FOREIGN KEY (run_id, key) REFERENCES stepgate.stream (run_id, key) ON DELETE CASCADE;

CREATE TABLE stepgate.run_tombstone (
    id          uuid        PRIMARY KEY,
    tenant      text        NOT NULL,
    function    text        NOT NULL,
    finished_at timestamptz NOT NULL,
    deleted_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_tombstone_by_age ON stepgate.run_tombstone (deleted_at);

-- Only the gateway's system role deletes, and only what retention deletes.
GRANT DELETE ON stepgate.run, stepgate.event, stepgate.stream, stepgate.stream_chunk TO stepgate_system;
GRANT SELECT, INSERT, DELETE ON stepgate.run_tombstone TO stepgate_system;
GRANT SELECT ON stepgate.run_tombstone TO stepgate_app;
ALTER TABLE stepgate.run_tombstone ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.run_tombstone TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.run_tombstone TO stepgate_system USING (true);
