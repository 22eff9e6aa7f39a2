-- journal_entry and attempt_failure carry their run's tenant, first in their primary key,
-- as the tables keyed by tenant do (docs/schema.md#ready-to-shard-by-tenant): stepgate_app's
-- policy is the plain equality on it, not a lookup of the run, and a database sharded by
-- tenant can hold a run's entries beside the run.

ALTER TABLE stepgate.journal_entry ADD COLUMN tenant text;
ALTER TABLE stepgate.attempt_failure ADD COLUMN tenant text;

-- Existing rows take their run's tenant; the guard, which refuses any change of an entry
-- but its running total (tenant included, from now on), is off for this one update.
ALTER TABLE stepgate.journal_entry DISABLE TRIGGER journal_entry_is_immutable;
UPDATE stepgate.journal_entry e SET tenant = r.tenant FROM stepgate.run r WHERE r.id = e.run_id;
ALTER TABLE stepgate.journal_entry ENABLE TRIGGER journal_entry_is_immutable;
UPDATE stepgate.attempt_failure f SET tenant = r.tenant FROM stepgate.run r WHERE r.id = f.run_id;

ALTER TABLE stepgate.journal_entry ALTER COLUMN tenant SET NOT NULL,
    DROP CONSTRAINT journal_entry_pkey,
    ADD CONSTRAINT journal_entry_pkey PRIMARY KEY (tenant, run_id, seq);
ALTER TABLE stepgate.attempt_failure ALTER COLUMN tenant SET NOT NULL,
    DROP CONSTRAINT attempt_failure_pkey,
    ADD CONSTRAINT attempt_failure_pkey PRIMARY KEY (tenant, run_id, seq, attempt);

-- An entry's tenant is its run's: the database holds it to that, by a foreign key on both
-- (which a table sharded by tenant needs too), through a unique index of run on them.
ALTER TABLE stepgate.run ADD CONSTRAINT run_tenant_id_key UNIQUE (tenant, id);
ALTER TABLE stepgate.journal_entry DROP CONSTRAINT journal_entry_run_id_fkey,
    ADD CONSTRAINT journal_entry_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.attempt_failure DROP CONSTRAINT attempt_failure_run_id_fkey,
    ADD CONSTRAINT attempt_failure_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;

DROP INDEX stepgate.journal_entry_value;
CREATE INDEX journal_entry_value ON stepgate.journal_entry USING btree (tenant, run_id, name, seq DESC) WHERE (kind = 'value'::text);

DROP POLICY tenant_isolation ON stepgate.journal_entry;
CREATE POLICY tenant_isolation ON stepgate.journal_entry TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));
DROP POLICY tenant_isolation ON stepgate.attempt_failure;
CREATE POLICY tenant_isolation ON stepgate.attempt_failure TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

-- The running total of a run's journal bytes below seq (the nearest entry below it); the
-- tenant, which leads the key, is the run's.
DROP FUNCTION stepgate.journal_bytes_before(uuid, integer);
CREATE FUNCTION stepgate.journal_bytes_before(tenant text, run uuid, seq integer) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce((SELECT p.journal_bytes FROM stepgate.journal_entry p
                     WHERE p.tenant = journal_bytes_before.tenant AND p.run_id = run AND p.seq < journal_bytes_before.seq
                     ORDER BY p.seq DESC LIMIT 1), 0)
$$;

GRANT ALL ON FUNCTION stepgate.journal_bytes_before(tenant text, run uuid, seq integer) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.journal_bytes_before(tenant text, run uuid, seq integer) TO stepgate_system;

-- Trigger: a child's end journaled in its waiting parent, which is made due when it waited
-- for it. The parent is of the child's tenant; its entries are keyed by it.
CREATE OR REPLACE FUNCTION stepgate.wake_parent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    p record;
    size bigint;
    output jsonb := CASE WHEN NEW.status = 'completed' THEN coalesce(NEW.output, 'null') END;
    error jsonb := CASE WHEN NEW.status <> 'completed' THEN NEW.error END;
BEGIN
    SELECT r.id, r.tenant, r.invocation, r.awaiting INTO p FROM stepgate.run r
    WHERE r.id = NEW.parent_id AND r.tenant = NEW.tenant
      AND r.status = 'suspended' AND r.wake_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    size := octet_length(coalesce(output, error)::text);
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, error, invocation, started_at, journal_bytes)
    VALUES (p.tenant, p.id, NEW.parent_seq, 'invoke', NEW.parent_name, output, error, p.invocation, NEW.created_at,
            stepgate.journal_bytes_before(p.tenant, p.id, NEW.parent_seq) + size)
    ON CONFLICT (tenant, run_id, seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A sibling that ended first sits above this entry: its total gains this one's bytes.
    UPDATE stepgate.journal_entry SET journal_bytes = journal_bytes + size
    WHERE tenant = p.tenant AND run_id = p.id AND seq > NEW.parent_seq;
    IF p.awaiting->>'kind' = 'invoke_all' AND (
        SELECT count(*) FROM stepgate.journal_entry j
        WHERE j.tenant = p.tenant AND j.run_id = p.id AND j.seq >= (p.awaiting->>'seq')::int
          AND j.seq < (p.awaiting->>'seq')::int + (p.awaiting->>'count')::int
    ) < (p.awaiting->>'count')::int THEN
        RETURN NULL;
    END IF;
    UPDATE stepgate.run SET wake_at = now() WHERE id = p.id;
    RETURN NULL;
END
$$;
