-- Storage quotas per tenant (issue 24, item 5): what a tenant stores, counted as it is
-- written, so that a write past the tenant's cap is refused without counting rows.
--
-- tenant_usage holds a tenant's stored runs (not yet deleted), the bytes of its runs'
-- streams (the streams' bytes columns) and the bytes of the messages waiting in its
-- runs' mailboxes (not yet received; a message's bytes are octet_length(data::text)).
-- Triggers keep it in the statement that writes: a run inserted or deleted, a stream's
-- bytes grown or the stream deleted, a message stored unconsumed, consumed or deleted.
-- Retention's deletes (and their cascades) therefore give the room back in their own
-- transaction.
--
-- A tenant's usage is the sum of its rows, one per stripe: a write adds to the stripe of
-- its database connection (the backend's pid mod 32), so two writers of one tenant
-- on different connections never wait for each other's row (one row per tenant would
-- put all of a tenant's run starts in one line, one commit after another: migration
-- 0037 explains why). A stripe may go negative (a run counted in one stripe, deleted
-- through another connection); only the sum means something. The caps are checked by
-- the writes' own statements against that sum (journal.TenantUsageOf reads it):
-- writers in flight at once each see the sum without the others, so a cap can be
-- passed by at most one write per transaction in flight for the tenant (see the
-- README's Security model).
CREATE TABLE stepgate.tenant_usage (
    tenant        text     NOT NULL,
    stripe        smallint NOT NULL,
    runs          bigint   NOT NULL DEFAULT 0,
    stream_bytes  bigint   NOT NULL DEFAULT 0,
    mailbox_bytes bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, stripe)
);

CREATE FUNCTION stepgate.usage_add(t text, d_runs bigint, d_stream bigint, d_mailbox bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, runs, stream_bytes, mailbox_bytes)
    VALUES (t, pg_backend_pid() % 32, d_runs, d_stream, d_mailbox)
    ON CONFLICT (tenant, stripe) DO UPDATE SET runs = u.runs + excluded.runs,
        stream_bytes = u.stream_bytes + excluded.stream_bytes,
        mailbox_bytes = u.mailbox_bytes + excluded.mailbox_bytes
$$;

-- Runs: once per statement, by tenant (retention deletes hundreds in one).
CREATE FUNCTION stepgate.usage_runs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM stepgate.usage_add(tenant, count(*), 0, 0) FROM new_runs GROUP BY tenant;
    RETURN NULL;
END
$$;
CREATE FUNCTION stepgate.usage_runs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM stepgate.usage_add(tenant, -count(*), 0, 0) FROM old_runs GROUP BY tenant;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_usage_on_insert AFTER INSERT ON stepgate.run
    REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION stepgate.usage_runs_inserted();
CREATE TRIGGER run_usage_on_delete AFTER DELETE ON stepgate.run
    REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION stepgate.usage_runs_deleted();

-- Streams: their bytes column (journal.WriteStream grows it with the chunks it stores).
CREATE FUNCTION stepgate.usage_stream_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM stepgate.usage_add(OLD.tenant, 0, -OLD.bytes, 0);
    ELSE
        PERFORM stepgate.usage_add(NEW.tenant, 0, NEW.bytes - OLD.bytes, 0);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER stream_usage_on_update AFTER UPDATE OF bytes ON stepgate.stream
    FOR EACH ROW WHEN (NEW.bytes <> OLD.bytes) EXECUTE FUNCTION stepgate.usage_stream_changed();
CREATE TRIGGER stream_usage_on_delete AFTER DELETE ON stepgate.stream
    FOR EACH ROW WHEN (OLD.bytes <> 0) EXECUTE FUNCTION stepgate.usage_stream_changed();

-- Mailboxes: messages stored unconsumed, then consumed by a receive, or deleted.
CREATE FUNCTION stepgate.usage_message_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM stepgate.usage_add(NEW.tenant, 0, 0, octet_length(NEW.data::text));
    ELSE
        PERFORM stepgate.usage_add(OLD.tenant, 0, 0, -octet_length(OLD.data::text));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER message_usage_on_insert AFTER INSERT ON stepgate.message
    FOR EACH ROW WHEN (NEW.consumed_seq IS NULL) EXECUTE FUNCTION stepgate.usage_message_changed();
CREATE TRIGGER message_usage_on_consume AFTER UPDATE OF consumed_seq ON stepgate.message
    FOR EACH ROW WHEN (OLD.consumed_seq IS NULL AND NEW.consumed_seq IS NOT NULL) EXECUTE FUNCTION stepgate.usage_message_changed();
CREATE TRIGGER message_usage_on_delete AFTER DELETE ON stepgate.message
    FOR EACH ROW WHEN (OLD.consumed_seq IS NULL) EXECUTE FUNCTION stepgate.usage_message_changed();

-- Tenant isolation, as migration 0004 sets it up for every table. The triggers run as
-- the writer's role: the API's writes add to their own tenant's rows only.
GRANT SELECT, INSERT, UPDATE ON stepgate.tenant_usage TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.tenant_usage ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.tenant_usage TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.tenant_usage TO stepgate_system USING (true);

-- What is stored already, in stripe 0. The triggers above were created first, in this
-- transaction, whose locks on the tables keep every writer out until it commits.
SET LOCAL ROLE stepgate_system;
INSERT INTO stepgate.tenant_usage (tenant, stripe, runs, stream_bytes, mailbox_bytes)
SELECT tenant, 0, sum(runs), sum(stream_bytes), sum(mailbox_bytes) FROM (
    SELECT tenant, count(*) AS runs, 0 AS stream_bytes, 0 AS mailbox_bytes FROM stepgate.run GROUP BY tenant
    UNION ALL
    SELECT tenant, 0, sum(bytes), 0 FROM stepgate.stream GROUP BY tenant
    UNION ALL
    SELECT tenant, 0, 0, sum(octet_length(data::text)) FROM stepgate.message WHERE consumed_seq IS NULL GROUP BY tenant
) u GROUP BY tenant;
RESET ROLE;
