-- Every byte a tenant stores counts against a quota: its events' data, and its runs'
-- journals (docs/schema.md, Tenant usage).
--
-- Events are counted as they are written and deleted, as messages are, by statement
-- triggers on stepgate.event: octet_length of the data's text, the size the API takes.
-- The events stored before this migration are counted here, once.
--
-- A run's journal is counted when the run finishes, where a statement already runs:
-- the BEFORE UPDATE trigger run_journal_bytes_on_finish keeps the journal's size (its
-- last entry's journal_bytes) in run.journal_bytes and adds it to the tenant's usage;
-- deleting the run (retention) takes it back. No checkpoint pays for it. The journals of
-- runs not yet finished are not counted: a tenant passes its quota by at most its
-- unfinished runs' journals (each bounded by STEPGATE_MAX_JOURNAL_BYTES). Runs finished
-- before this migration are not counted (their journal_bytes stays NULL).
ALTER TABLE stepgate.tenant_usage
    ADD COLUMN event_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN journal_bytes bigint NOT NULL DEFAULT 0;

ALTER TABLE stepgate.run ADD COLUMN journal_bytes bigint;

COMMENT ON COLUMN stepgate.run.journal_bytes IS
    'The journal''s bytes (outputs and errors) counted in tenant_usage when the run finished; NULL: not counted (not finished, or finished before migration 0055).';

-- usage_add_bytes adds to a tenant's event and journal bytes, on the stripe of this
-- connection, as usage_add does to the other counters.
CREATE FUNCTION stepgate.usage_add_bytes(t text, d_events bigint, d_journal bigint) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, event_bytes, journal_bytes)
    VALUES (t, pg_backend_pid() % 32, d_events, d_journal)
    ON CONFLICT (tenant, stripe) DO UPDATE SET event_bytes = u.event_bytes + excluded.event_bytes,
        journal_bytes = u.journal_bytes + excluded.journal_bytes
$$;

CREATE FUNCTION stepgate.usage_events_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM stepgate.usage_add_bytes(tenant, sum(octet_length(data::text))::bigint, 0) FROM new_events GROUP BY tenant;
    RETURN NULL;
END
$$;

CREATE FUNCTION stepgate.usage_events_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM stepgate.usage_add_bytes(tenant, -sum(octet_length(data::text))::bigint, 0) FROM old_events GROUP BY tenant;
    RETURN NULL;
END
$$;

CREATE TRIGGER event_usage_on_insert AFTER INSERT ON stepgate.event
    REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION stepgate.usage_events_inserted();

CREATE TRIGGER event_usage_on_delete AFTER DELETE ON stepgate.event
    REFERENCING OLD TABLE AS old_events FOR EACH STATEMENT EXECUTE FUNCTION stepgate.usage_events_deleted();

-- run_journal_bytes_on_finish: a run that finishes keeps its journal's size and adds it
-- to its tenant's usage.
CREATE FUNCTION stepgate.usage_run_finished() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.journal_bytes := coalesce((SELECT e.journal_bytes FROM stepgate.journal_entry e
        WHERE e.tenant = NEW.tenant AND e.run_id = NEW.id AND e.journal_bytes IS NOT NULL
        ORDER BY e.seq DESC LIMIT 1), 0);
    IF NEW.journal_bytes > 0 THEN
        PERFORM stepgate.usage_add_bytes(NEW.tenant, 0, NEW.journal_bytes);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER run_journal_bytes_on_finish BEFORE UPDATE OF finished_at ON stepgate.run
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION stepgate.usage_run_finished();

-- A deleted run gives back its runs' count, as before, and the journal bytes counted
-- when it finished.
CREATE OR REPLACE FUNCTION stepgate.usage_runs_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM stepgate.usage_add(tenant, -count(*), 0, 0) FROM old_runs GROUP BY tenant;
    PERFORM stepgate.usage_add_bytes(tenant, 0, -sum(journal_bytes)::bigint) FROM old_runs
        WHERE journal_bytes > 0 GROUP BY tenant;
    RETURN NULL;
END
$$;

-- The events stored already.
INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, event_bytes)
SELECT tenant, 0, sum(octet_length(data::text)) FROM stepgate.event GROUP BY tenant
ON CONFLICT (tenant, stripe) DO UPDATE SET event_bytes = u.event_bytes + excluded.event_bytes;

GRANT ALL ON FUNCTION stepgate.usage_add_bytes(t text, d_events bigint, d_journal bigint) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.usage_add_bytes(t text, d_events bigint, d_journal bigint) TO stepgate_system;
