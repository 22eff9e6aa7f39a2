-- A tenant's usage is counted in one row per database connection (backend) that wrote
-- for it, not in 32 rows shared by the connections (pid mod 32): two connections never
-- write one row, so no write waits for another's commit to count a start, a finish's
-- journal bytes or an event (with 40 connections on 32 stripes, some always shared a
-- row, and each write held it until its commit). The rows of connections that have
-- ended are folded into the tenant's row of stripe 0 by the maintenance passes
-- (journal.FoldUsage, UsageFold), so a tenant's rows stay about as many as the
-- connections that write for it. A tenant's usage is still the sum of its rows.
ALTER TABLE stepgate.tenant_usage ALTER COLUMN stripe TYPE integer;

CREATE OR REPLACE FUNCTION stepgate.usage_add(t text, d_runs bigint, d_stream bigint, d_mailbox bigint) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, runs, stream_bytes, mailbox_bytes)
    VALUES (t, pg_backend_pid(), d_runs, d_stream, d_mailbox)
    ON CONFLICT (tenant, stripe) DO UPDATE SET runs = u.runs + excluded.runs,
        stream_bytes = u.stream_bytes + excluded.stream_bytes,
        mailbox_bytes = u.mailbox_bytes + excluded.mailbox_bytes
$$;

CREATE OR REPLACE FUNCTION stepgate.usage_add_bytes(t text, d_events bigint, d_journal bigint) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, event_bytes, journal_bytes)
    VALUES (t, pg_backend_pid(), d_events, d_journal)
    ON CONFLICT (tenant, stripe) DO UPDATE SET event_bytes = u.event_bytes + excluded.event_bytes,
        journal_bytes = u.journal_bytes + excluded.journal_bytes
$$;

-- backend_alive says whether a database connection of that pid is open now.
CREATE FUNCTION stepgate.backend_alive(pid integer) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = backend_alive.pid) $$;

GRANT DELETE ON TABLE stepgate.tenant_usage TO stepgate_system;
