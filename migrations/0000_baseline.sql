-- The baseline: stepgate's schema as migrations 0001-0045 left it, written out once for
-- the first release. A new database runs this file; a database migrated by those files
-- records it as applied without running it (migrations.go says how), so this file and
-- the files before it make the same schema (TestHistoryUpgrade compares the two dumps).
-- Never edit it: a change is a new migration, numbered from 0046.
--
-- Tenant isolation (docs/schema.md#tenant-isolation): every table has row-level security, ENABLEd and
-- FORCEd, with two policies: tenant_isolation for stepgate_app, the API pool's role, which
-- sees the rows of the tenant in the setting stepgate.tenant (journal.ForTenant sets it
-- per transaction; with none set nothing is visible), and system_access for
-- stepgate_system, the system pool's role, which sees every row. The app policy is a plain
-- equality, never an OR, so that the planner merges it with a query's own tenant filter.
-- A table added later needs its GRANTs to both roles, both policies and row-level
-- security (journal's TestSchemaIsFenced checks every table).
--
-- Tables come first, by concept, each with its constraints, indexes, policies and grants;
-- then the functions; then the triggers (docs/internals.md lists each). Why each table is
-- the way it is: docs/schema.md; the concurrency limits' algorithm: docs/concurrency.md.

-- The two roles the gateway's pools act as: neither a superuser, BYPASSRLS nor the owner
-- of anything, so the policies apply to them. The user that migrates is made a member
-- when it may be, so that it may also serve.
DO $$
DECLARE
    role_name name;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['stepgate_app', 'stepgate_system'] LOOP
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
            END IF;
        EXCEPTION
            -- Roles belong to the server, not the database: another database's
            -- migration may have created it at the same moment.
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'stepgate needs the role %, and % may not create roles', role_name, current_user
                    USING HINT = 'As a superuser: CREATE ROLE stepgate_app NOLOGIN; CREATE ROLE stepgate_system NOLOGIN; GRANT stepgate_app, stepgate_system TO <the gateway''s database user>; then migrate again.';
        END;
        -- A user that migrates may also serve (a superuser needs no membership). When it
        -- may not grant, the operator does (the gateway says so at start).
        IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
            BEGIN
                EXECUTE format('GRANT %I TO %I', role_name, current_user);
            EXCEPTION WHEN insufficient_privilege OR unique_violation THEN NULL;
            END;
        END IF;
    END LOOP;
END $$;

GRANT USAGE ON SCHEMA stepgate TO stepgate_app, stepgate_system;

-- What take_slots returns: the index of the key that blocked the run, or the stripe taken
-- per key.
CREATE TYPE stepgate.slots_taken AS (
	blocked integer,
	stripes smallint[]
);

-- ======================================================================================
-- Registered functions: one row per name, and every revision deployed (immutable).
-- ======================================================================================

-- A function as deployed, never changed: its URL, config and the defaults a run takes from it.
CREATE TABLE stepgate.function_revision (
    tenant text NOT NULL,
    name text NOT NULL,
    revision integer NOT NULL,
    url text NOT NULL,
    config jsonb DEFAULT '{}'::jsonb NOT NULL,
    timeout_ms bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    run_timeout_ms bigint,
    retention_ms bigint,
    CONSTRAINT function_revision_retention_ms_check CHECK ((retention_ms > 0)),
    CONSTRAINT function_revision_revision_check CHECK ((revision > 0)),
    CONSTRAINT function_revision_timeout_ms_check CHECK ((timeout_ms > 0)),
    PRIMARY KEY (tenant, name, revision)
);

ALTER TABLE stepgate.function_revision ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.function_revision TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.function_revision TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT ON TABLE stepgate.function_revision TO stepgate_app;
GRANT SELECT,INSERT ON TABLE stepgate.function_revision TO stepgate_system;

-- A registered function: its current revision. Deleting it leaves the revisions to their runs.
CREATE TABLE stepgate.function (
    tenant text NOT NULL,
    name text NOT NULL,
    revision integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    PRIMARY KEY (tenant, name),
    FOREIGN KEY (tenant, name, revision) REFERENCES stepgate.function_revision(tenant, name, revision)
);

ALTER TABLE stepgate.function ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.function TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.function TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.function TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.function TO stepgate_system;

-- ======================================================================================
-- Runs: one row per run; its journal (immutable entries) and failed attempts; what retention leaves of a deleted run; long operations.
-- ======================================================================================

-- A run: its status and the columns of each of its states (docs/internals.md). No foreign key to its
-- revision: revisions are never deleted, and the check would lock a hot row on every start.
CREATE TABLE stepgate.run (
    id uuid NOT NULL,
    tenant text NOT NULL,
    function text NOT NULL,
    revision integer NOT NULL,
    status text NOT NULL,
    input jsonb NOT NULL,
    output jsonb,
    error jsonb,
    identity jsonb NOT NULL,
    idempotency_key text,
    parent_id uuid,
    attempts integer DEFAULT 0 NOT NULL,
    invocation integer DEFAULT 0 NOT NULL,
    failed_invocations integer DEFAULT 0 NOT NULL,
    notify boolean DEFAULT false NOT NULL,
    lease_until timestamp with time zone,
    wake_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    rerun_of uuid,
    parent_seq integer,
    parent_name text,
    cancelled_by jsonb,
    recoveries integer DEFAULT 0 NOT NULL,
    recovered_seq integer DEFAULT 0 NOT NULL,
    awaiting jsonb,
    deadline timestamp with time zone,
    detached boolean DEFAULT false NOT NULL,
    held text,
    slot_keys text[],
    slot_limits integer[],
    held_on text,
    priority smallint DEFAULT 2 NOT NULL,
    slot_stripes smallint[],
    lifetime_failed_invocations integer DEFAULT 0 NOT NULL,
    lifetime_recoveries integer DEFAULT 0 NOT NULL,
    owner_nonce text,
    CONSTRAINT run_check CHECK (((status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) = (finished_at IS NOT NULL))),
    CONSTRAINT run_check1 CHECK (((status = 'running'::text) = (lease_until IS NOT NULL))),
    CONSTRAINT run_lifetime_failed_invocations_check CHECK ((lifetime_failed_invocations >= 0)),
    CONSTRAINT run_lifetime_recoveries_check CHECK ((lifetime_recoveries >= 0)),
    CONSTRAINT run_parent_entry CHECK (((parent_seq IS NULL) OR ((parent_id IS NOT NULL) AND (parent_seq > 0) AND (parent_name IS NOT NULL)))),
    CONSTRAINT run_priority_check CHECK (((priority >= 1) AND (priority <= 4))),
    CONSTRAINT run_recovered_seq_check CHECK ((recovered_seq >= 0)),
    CONSTRAINT run_recoveries_check CHECK ((recoveries >= 0)),
    CONSTRAINT run_status_check CHECK ((status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text, 'suspended'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    PRIMARY KEY (id)
);

COMMENT ON COLUMN stepgate.run.attempts IS 'Invocations of the run: claims that call its function, the current one included (the protocol''s run.attempt). A claim that fails the run before calling is not counted.';

COMMENT ON COLUMN stepgate.run.failed_invocations IS 'Failed invocations in a row, for the function''s retry policy; reset by any outcome but a retried failure.';

COMMENT ON COLUMN stepgate.run.recoveries IS 'Recoveries in a row since the journal last grew, for STEPGATE_MAX_RECOVERIES; reset by any outcome of an invocation.';

COMMENT ON COLUMN stepgate.run.lifetime_failed_invocations IS 'Failed invocations of the run in its lifetime: no answer, an answer other than HTTP 200, or an answer or checkpoint the gateway cannot apply. Never reset.';

COMMENT ON COLUMN stepgate.run.lifetime_recoveries IS 'Recoveries of the run in its lifetime: invocations whose gateway died, stopped or lost the database, requeued. Never reset.';

COMMENT ON COLUMN stepgate.run.owner_nonce IS 'The nonce of the process that claimed the current invocation (checkpointCurrent): 32 lowercase hex digits, or NULL before the first question of the invocation. Set back to NULL by every statement that bumps invocation.';

CREATE INDEX run_by_created ON stepgate.run USING btree (tenant, created_at, id);

CREATE INDEX run_by_finished ON stepgate.run USING btree (finished_at) WHERE (finished_at IS NOT NULL);

CREATE INDEX run_by_function ON stepgate.run USING btree (tenant, function, created_at, id);

CREATE INDEX run_by_idempotency_key ON stepgate.run USING btree (tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE UNIQUE INDEX run_child ON stepgate.run USING btree (parent_id, parent_seq) WHERE (parent_id IS NOT NULL);

CREATE INDEX run_deadline ON stepgate.run USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text, 'suspended'::text])));

CREATE INDEX run_due ON stepgate.run USING btree (COALESCE(wake_at, created_at)) WHERE ((status = ANY (ARRAY['queued'::text, 'scheduled'::text])) OR ((status = 'suspended'::text) AND (wake_at IS NOT NULL)));

CREATE INDEX run_expired_lease ON stepgate.run USING btree (lease_until) WHERE (lease_until IS NOT NULL);

CREATE UNIQUE INDEX run_idempotency_key ON stepgate.run USING btree (tenant, function, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE INDEX run_slot_line ON stepgate.run USING btree (tenant, function, held_on, created_at, id) WHERE ((held_on IS NOT NULL) AND (status = ANY (ARRAY['queued'::text, 'scheduled'::text, 'suspended'::text])));

CREATE INDEX run_slot_running ON stepgate.run USING btree (tenant, function) WHERE ((status = 'running'::text) AND (slot_keys IS NOT NULL));

ALTER TABLE stepgate.run ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.run TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.run TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.run TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.run TO stepgate_system;

-- A run's journal: immutable entries, the first write wins; journal_bytes is the running total
-- of the entries' bytes at or below seq (docs/schema.md#journal-bytes-and-parallel-steps).
CREATE TABLE stepgate.journal_entry (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    output jsonb,
    error jsonb,
    attempt integer DEFAULT 1 NOT NULL,
    wake_at timestamp with time zone,
    invocation integer NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone DEFAULT now() NOT NULL,
    journal_bytes bigint,
    copied_from uuid,
    CONSTRAINT journal_entry_seq_check CHECK ((seq > 0)),
    PRIMARY KEY (run_id, seq),
    FOREIGN KEY (run_id) REFERENCES stepgate.run(id) ON DELETE CASCADE
);

CREATE INDEX journal_entry_value ON stepgate.journal_entry USING btree (run_id, name, seq DESC) WHERE (kind = 'value'::text);

ALTER TABLE stepgate.journal_entry ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.journal_entry TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.journal_entry TO stepgate_app USING ((EXISTS ( SELECT 1
   FROM stepgate.run r
  WHERE ((r.id = journal_entry.run_id) AND (r.tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text))))));

GRANT SELECT,INSERT ON TABLE stepgate.journal_entry TO stepgate_app;
GRANT SELECT,INSERT ON TABLE stepgate.journal_entry TO stepgate_system;

GRANT UPDATE(journal_bytes) ON TABLE stepgate.journal_entry TO stepgate_app;
GRANT UPDATE(journal_bytes) ON TABLE stepgate.journal_entry TO stepgate_system;

-- Failed attempts, for inspection, never replayed: seq 0 a whole invocation, else a step's.
CREATE TABLE stepgate.attempt_failure (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    attempt integer NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    error jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT attempt_failure_seq_check CHECK ((seq >= 0)),
    PRIMARY KEY (run_id, seq, attempt),
    FOREIGN KEY (run_id) REFERENCES stepgate.run(id) ON DELETE CASCADE
);

ALTER TABLE stepgate.attempt_failure ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.attempt_failure TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.attempt_failure TO stepgate_app USING ((EXISTS ( SELECT 1
   FROM stepgate.run r
  WHERE ((r.id = attempt_failure.run_id) AND (r.tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text))))));

GRANT SELECT,INSERT ON TABLE stepgate.attempt_failure TO stepgate_app;
GRANT SELECT,INSERT ON TABLE stepgate.attempt_failure TO stepgate_system;

-- What retention leaves of a deleted run: reading it is a 404 that says why.
CREATE TABLE stepgate.run_tombstone (
    id uuid NOT NULL,
    tenant text NOT NULL,
    function text NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    deleted_at timestamp with time zone DEFAULT now() NOT NULL,
    PRIMARY KEY (id)
);

CREATE INDEX run_tombstone_by_age ON stepgate.run_tombstone USING btree (deleted_at);

ALTER TABLE stepgate.run_tombstone ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.run_tombstone TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.run_tombstone TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE ON TABLE stepgate.run_tombstone TO stepgate_system;
GRANT SELECT ON TABLE stepgate.run_tombstone TO stepgate_app;

-- A long piece of work on many runs of a tenant (a bulk cancel), done in batches; one running
-- per tenant.
CREATE TABLE stepgate.operation (
    id uuid NOT NULL,
    tenant text NOT NULL,
    kind text NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    filter jsonb NOT NULL,
    by_identity jsonb NOT NULL,
    matched bigint,
    cancelled bigint DEFAULT 0 NOT NULL,
    batches integer DEFAULT 0 NOT NULL,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT operation_kind_check CHECK ((kind = 'cancel'::text)),
    CONSTRAINT operation_status_check CHECK ((status = ANY (ARRAY['running'::text, 'completed'::text, 'failed'::text]))),
    PRIMARY KEY (id)
);

CREATE UNIQUE INDEX operation_running ON stepgate.operation USING btree (tenant) WHERE (status = 'running'::text);

CREATE INDEX operation_tenant ON stepgate.operation USING btree (tenant, created_at DESC);

ALTER TABLE stepgate.operation ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.operation TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.operation TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.operation TO stepgate_app;
GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.operation TO stepgate_system;

-- ======================================================================================
-- Waits: what a suspended run waits for (events, callbacks, messages), and the events, callbacks and messages themselves.
-- ======================================================================================

-- What a suspended run waits for outside itself, one row per wait (alternative), deleted when
-- it resumes, times out or is cancelled (docs/schema.md#event-waits).
CREATE TABLE stepgate.run_wait (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    tenant text NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    event_name text,
    match_key text,
    expires_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    callback_seq integer,
    topic text,
    alt smallint DEFAULT '-1'::integer NOT NULL,
    CONSTRAINT run_wait_callback CHECK (((kind <> 'await_callback'::text) OR (callback_seq IS NOT NULL))),
    CONSTRAINT run_wait_event CHECK (((kind <> 'wait_event'::text) OR ((event_name IS NOT NULL) AND (match_key IS NOT NULL)))),
    CONSTRAINT run_wait_receive CHECK (((kind <> 'receive'::text) OR (topic IS NOT NULL))),
    PRIMARY KEY (run_id, seq, alt)
);

CREATE INDEX run_wait_by_match ON stepgate.run_wait USING btree (tenant, event_name, match_key);

ALTER TABLE stepgate.run_wait ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.run_wait TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.run_wait TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE ON TABLE stepgate.run_wait TO stepgate_app;
GRANT SELECT,INSERT,DELETE ON TABLE stepgate.run_wait TO stepgate_system;

-- The match shapes runs wait on, per tenant and event name: what an event computes keys for.
CREATE TABLE stepgate.wait_shape (
    tenant text NOT NULL,
    event_name text NOT NULL,
    paths text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    PRIMARY KEY (tenant, event_name, paths)
);

ALTER TABLE stepgate.wait_shape ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.wait_shape TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.wait_shape TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT ON TABLE stepgate.wait_shape TO stepgate_app;
GRANT SELECT,INSERT ON TABLE stepgate.wait_shape TO stepgate_system;

--
-- PostgreSQL database dump complete
--

-- Events sent to a tenant, with the runs their triggers started or skipped.
CREATE TABLE stepgate.event (
    tenant text NOT NULL,
    id text NOT NULL,
    name text NOT NULL,
    data jsonb NOT NULL,
    identity jsonb NOT NULL,
    source_run_id uuid,
    runs uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    skipped jsonb,
    CONSTRAINT event_id_check CHECK ((id <> ''::text)),
    CONSTRAINT event_name_check CHECK ((name <> ''::text)),
    PRIMARY KEY (tenant, id)
);

CREATE INDEX event_by_age ON stepgate.event USING btree (created_at);

CREATE INDEX event_by_created ON stepgate.event USING btree (tenant, created_at DESC, id DESC);

CREATE INDEX event_by_name ON stepgate.event USING btree (tenant, name, created_at);

ALTER TABLE stepgate.event ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.event TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.event TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT ON TABLE stepgate.event TO stepgate_app;
GRANT SELECT,INSERT,DELETE ON TABLE stepgate.event TO stepgate_system;

GRANT UPDATE(runs) ON TABLE stepgate.event TO stepgate_app;
GRANT UPDATE(runs) ON TABLE stepgate.event TO stepgate_system;

GRANT UPDATE(skipped) ON TABLE stepgate.event TO stepgate_app;
GRANT UPDATE(skipped) ON TABLE stepgate.event TO stepgate_system;

-- Callbacks: the token's SHA-256 only; resolved at most once (docs/schema.md#callbacks).
CREATE TABLE stepgate.callback (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    tenant text NOT NULL,
    name text NOT NULL,
    token_hash bytea NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    payload jsonb,
    error jsonb,
    resolver text,
    resolved_by jsonb,
    awaited_seq integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    resolved_at timestamp with time zone,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT callback_resolved CHECK (((state = 'pending'::text) = ((resolved_at IS NULL) AND (resolver IS NULL)))),
    CONSTRAINT callback_resolver_check CHECK ((resolver = ANY (ARRAY['token'::text, 'identity'::text]))),
    CONSTRAINT callback_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'resolved'::text, 'rejected'::text]))),
    PRIMARY KEY (run_id, seq),
    UNIQUE (token_hash),
    FOREIGN KEY (run_id) REFERENCES stepgate.run(id) ON DELETE CASCADE
);

CREATE INDEX callback_by_name ON stepgate.callback USING btree (run_id, name, seq);

ALTER TABLE stepgate.callback ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.callback TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.callback TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.callback TO stepgate_app;
GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.callback TO stepgate_system;

-- Each run's mailbox, in the order sends took the run's row lock (docs/schema.md#messages).
CREATE TABLE stepgate.message (
    n bigint NOT NULL,
    tenant text NOT NULL,
    run_id uuid NOT NULL,
    id text NOT NULL,
    topic text NOT NULL,
    data jsonb NOT NULL,
    identity jsonb NOT NULL,
    source_run_id uuid,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    consumed_seq integer,
    PRIMARY KEY (run_id, id),
    FOREIGN KEY (run_id) REFERENCES stepgate.run(id) ON DELETE CASCADE
);

ALTER TABLE stepgate.message ALTER COLUMN n ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME stepgate.message_n_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE INDEX message_unconsumed ON stepgate.message USING btree (run_id, topic, n) WHERE (consumed_seq IS NULL);

ALTER TABLE stepgate.message ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.message TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.message TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.message TO stepgate_app;
GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.message TO stepgate_system;

GRANT SELECT,USAGE ON SEQUENCE stepgate.message_n_seq TO stepgate_app;
GRANT SELECT,USAGE ON SEQUENCE stepgate.message_n_seq TO stepgate_system;

-- ======================================================================================
-- Streams a run writes.
-- ======================================================================================

-- A run's stream per key: its length, bytes and end; a write locks it.
CREATE TABLE stepgate.stream (
    tenant text NOT NULL,
    run_id uuid NOT NULL,
    key text NOT NULL,
    length integer DEFAULT 0 NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    closed_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT stream_bytes_check CHECK ((bytes >= 0)),
    CONSTRAINT stream_key_check CHECK ((key <> ''::text)),
    CONSTRAINT stream_length_check CHECK ((length >= 0)),
    PRIMARY KEY (run_id, key),
    FOREIGN KEY (run_id) REFERENCES stepgate.run(id) ON DELETE CASCADE
);

ALTER TABLE stepgate.stream ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.stream TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.stream TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.stream TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.stream TO stepgate_system;

-- A stream's chunks, once each, at their offsets; (at_seq, at_attempt, at_index) deduplicates
-- replays.
CREATE TABLE stepgate.stream_chunk (
    tenant text NOT NULL,
    run_id uuid NOT NULL,
    key text NOT NULL,
    pos integer NOT NULL,
    data jsonb NOT NULL,
    at_seq integer NOT NULL,
    at_attempt integer NOT NULL,
    at_index integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT stream_chunk_pos_check CHECK ((pos >= 0)),
    PRIMARY KEY (run_id, key, pos),
    UNIQUE (run_id, key, at_seq, at_attempt, at_index),
    FOREIGN KEY (run_id, key) REFERENCES stepgate.stream(run_id, key) ON DELETE CASCADE
);

ALTER TABLE stepgate.stream_chunk ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.stream_chunk TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.stream_chunk TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT ON TABLE stepgate.stream_chunk TO stepgate_app;
GRANT SELECT,INSERT,DELETE ON TABLE stepgate.stream_chunk TO stepgate_system;

-- ======================================================================================
-- Schedules and flow control: cron schedules, rate and debounce state, concurrency slots (docs/concurrency.md).
-- ======================================================================================

-- Cron schedules of a tenant's functions.
CREATE TABLE stepgate.schedule (
    id uuid NOT NULL,
    tenant text NOT NULL,
    name text NOT NULL,
    function text NOT NULL,
    cron text NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    input jsonb NOT NULL,
    identity jsonb NOT NULL,
    generation integer DEFAULT 1 NOT NULL,
    next_at timestamp with time zone NOT NULL,
    last_tick_at timestamp with time zone,
    last_run_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    catchup text DEFAULT 'one'::text NOT NULL,
    catchup_window_ms bigint DEFAULT 60000 NOT NULL,
    CONSTRAINT schedule_catchup_check CHECK ((catchup = ANY (ARRAY['skip'::text, 'one'::text, 'all'::text]))),
    CONSTRAINT schedule_catchup_window_ms_check CHECK (((catchup_window_ms >= 1000) AND (catchup_window_ms <= 86400000))),
    CONSTRAINT schedule_generation_check CHECK ((generation > 0)),
    PRIMARY KEY (id),
    UNIQUE (tenant, name)
);

CREATE INDEX schedule_next_at ON stepgate.schedule USING btree (next_at);

ALTER TABLE stepgate.schedule ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.schedule TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.schedule TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.schedule TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.schedule TO stepgate_system;

-- GCRA state of a throttle or rate limit per key value: tat is when the bucket is empty again.
CREATE TABLE stepgate.flow_rate (
    tenant text NOT NULL,
    function text NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    tat timestamp with time zone NOT NULL,
    CONSTRAINT flow_rate_kind_check CHECK ((kind = ANY (ARRAY['throttle'::text, 'rate_limit'::text]))),
    PRIMARY KEY (tenant, function, kind, key)
);

CREATE INDEX flow_rate_by_tat ON stepgate.flow_rate USING btree (tat);

ALTER TABLE stepgate.flow_rate ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.flow_rate TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.flow_rate TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.flow_rate TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.flow_rate TO stepgate_system;

-- A debounce's open window per key value: the scheduled run further starts collapse into.
CREATE TABLE stepgate.flow_debounce (
    tenant text NOT NULL,
    function text NOT NULL,
    key text NOT NULL,
    run_id uuid NOT NULL,
    first_at timestamp with time zone NOT NULL,
    PRIMARY KEY (tenant, function, key)
);

CREATE INDEX flow_debounce_by_first ON stepgate.flow_debounce USING btree (first_at);

ALTER TABLE stepgate.flow_debounce ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.flow_debounce TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.flow_debounce TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.flow_debounce TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.flow_debounce TO stepgate_system;

-- The counter of a concurrency key whose limit is below 64 (stripe 0); a key of 64 or more is
-- counted from the running runs (docs/concurrency.md).
CREATE TABLE stepgate.concurrency_slot (
    tenant text NOT NULL,
    function text NOT NULL,
    key text NOT NULL,
    running integer NOT NULL,
    lim integer NOT NULL,
    stripe smallint DEFAULT 0 NOT NULL,
    CONSTRAINT concurrency_slot_running_check CHECK ((running >= 0)),
    PRIMARY KEY (tenant, function, key, stripe)
);

ALTER TABLE stepgate.concurrency_slot ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.concurrency_slot TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.concurrency_slot TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.concurrency_slot TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.concurrency_slot TO stepgate_system;

-- ======================================================================================
-- Keys: per-tenant signing keys, invocation keys, the callback sealing key (system pool only).
-- ======================================================================================

-- Each tenant's keys that sign the requests to its functions (system role only).
CREATE TABLE stepgate.signing_key (
    tenant text NOT NULL,
    id text NOT NULL,
    seed bytea NOT NULL,
    public_key bytea NOT NULL,
    hmac_secret bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    retires_at timestamp with time zone,
    CONSTRAINT signing_key_hmac_secret_check CHECK ((octet_length(hmac_secret) = 32)),
    CONSTRAINT signing_key_public_key_check CHECK ((octet_length(public_key) = 32)),
    CONSTRAINT signing_key_seed_check CHECK ((octet_length(seed) = 32)),
    PRIMARY KEY (tenant, id)
);

CREATE UNIQUE INDEX signing_key_current ON stepgate.signing_key USING btree (tenant) WHERE (retires_at IS NULL);

ALTER TABLE stepgate.signing_key ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.signing_key TO stepgate_system USING (true);

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.signing_key TO stepgate_system;

-- The gateways' keys that sign invocation tokens, one current (system role only).
CREATE TABLE stepgate.invocation_key (
    id text NOT NULL,
    secret bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    retires_at timestamp with time zone,
    CONSTRAINT invocation_key_secret_check CHECK ((octet_length(secret) >= 32)),
    PRIMARY KEY (id)
);

CREATE UNIQUE INDEX invocation_key_current ON stepgate.invocation_key USING btree ((true)) WHERE (retires_at IS NULL);

ALTER TABLE stepgate.invocation_key ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.invocation_key TO stepgate_system USING (true);

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.invocation_key TO stepgate_system;

-- The secret that seals callback tokens in the journal (system role only).
CREATE TABLE stepgate.callback_key (
    one boolean DEFAULT true NOT NULL,
    secret bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT callback_key_one_check CHECK (one),
    CONSTRAINT callback_key_secret_check CHECK ((octet_length(secret) = 32)),
    PRIMARY KEY (one)
);

ALTER TABLE stepgate.callback_key ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.callback_key TO stepgate_system USING (true);

GRANT SELECT ON TABLE stepgate.callback_key TO stepgate_system;

-- The deployment's one secret: 256 bits hashed from three random UUIDs (366 bits from
-- the server's strong random source: gen_random_uuid uses it).
INSERT INTO stepgate.callback_key (secret)
SELECT sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));

-- ======================================================================================
-- Watches and usage: a gateway's live watches, a tenant's usage counters (one row per tenant and stripe).
-- ======================================================================================

-- Which gateways watch which tenants' run events, until expires_at: runs of unwatched tenants
-- notify nothing.
CREATE TABLE stepgate.run_watch (
    gateway_id text NOT NULL,
    tenant text NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    PRIMARY KEY (gateway_id, tenant)
);

CREATE INDEX run_watch_by_tenant ON stepgate.run_watch USING btree (tenant, expires_at);

ALTER TABLE stepgate.run_watch ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.run_watch TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.run_watch TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.run_watch TO stepgate_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE stepgate.run_watch TO stepgate_system;

-- What each tenant stores, for its quotas: one row per tenant and connection stripe, kept
-- by triggers; the sum is the usage (docs/schema.md#tenant-usage).
CREATE TABLE stepgate.tenant_usage (
    tenant text NOT NULL,
    stripe smallint NOT NULL,
    runs bigint DEFAULT 0 NOT NULL,
    stream_bytes bigint DEFAULT 0 NOT NULL,
    mailbox_bytes bigint DEFAULT 0 NOT NULL,
    PRIMARY KEY (tenant, stripe)
);

ALTER TABLE stepgate.tenant_usage ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.tenant_usage TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.tenant_usage TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.tenant_usage TO stepgate_app;
GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.tenant_usage TO stepgate_system;

-- ======================================================================================
-- stepgate.schema_migration (made by migrations.Up before any migration): the readiness
-- probe (GET /readyz) reads it through the system pool.
-- ======================================================================================

GRANT SELECT ON TABLE stepgate.schema_migration TO stepgate_system;

-- ======================================================================================
-- River's tables, in the schema River migrated into (the first of the search path, as
-- River names its tables unqualified), with no row-level security: both roles use them
-- (the API pool enqueues a run's job in the run's transaction). And an index to find a
-- run's job.
-- ======================================================================================
DO $$
DECLARE
    schema_name name := (SELECT relnamespace::regnamespace::name FROM pg_class WHERE oid = to_regclass('river_job'));
    rel record;
BEGIN
    IF schema_name IS NULL THEN
        RAISE EXCEPTION 'River''s tables are not on the search path (%)', current_setting('search_path');
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO stepgate_app, stepgate_system', schema_name);
    FOR rel IN
        SELECT c.relname, c.relkind FROM pg_class c
        WHERE c.relnamespace = schema_name::regnamespace AND c.relname LIKE 'river\_%' AND c.relkind IN ('r', 'p', 'S')
    LOOP
        IF rel.relkind = 'S' THEN
            EXECUTE format('GRANT USAGE, SELECT, UPDATE ON SEQUENCE %I.%I TO stepgate_app, stepgate_system', schema_name, rel.relname);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.%I TO stepgate_app, stepgate_system', schema_name, rel.relname);
        END IF;
    END LOOP;
END $$;


CREATE INDEX river_job_stepgate_run ON river_job USING btree (((args ->> 'run_id'::text))) WHERE (kind = 'stepgate.invoke'::text);

-- ======================================================================================
-- Functions: Guards
-- ======================================================================================

-- Trigger: refuses any change of a journal entry but its journal_bytes.
CREATE FUNCTION stepgate.refuse_journal_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.journal_bytes IS DISTINCT FROM OLD.journal_bytes
       AND (to_jsonb(NEW) - 'journal_bytes') = (to_jsonb(OLD) - 'journal_bytes') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'journal entry (%, %) is immutable', OLD.run_id, OLD.seq
        USING ERRCODE = 'check_violation';
END $$;

-- Trigger: refuses any change of a terminal run.
CREATE FUNCTION stepgate.refuse_terminal_run_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'run % is %, terminal runs are immutable', OLD.id, OLD.status
        USING ERRCODE = 'check_violation';
END $$;

-- ======================================================================================
-- Functions: Run events, jobs and parents
-- ======================================================================================

-- Trigger: a run's event on stepgate_run_events, only while a gateway watches its tenant.
CREATE FUNCTION stepgate.notify_run_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stepgate.run_watch w WHERE w.tenant = NEW.tenant AND w.expires_at > now()) THEN
        PERFORM pg_notify('stepgate_run_events', json_build_object('id', NEW.id, 'tenant', NEW.tenant,
            'function', NEW.function, 'status', NEW.status, 'invocations', NEW.attempts,
            'failed_invocations', NEW.lifetime_failed_invocations, 'recoveries', NEW.lifetime_recoveries,
            'wake_at', nullif(NEW.wake_at, 'infinity'), 'finished_at', NEW.finished_at)::text);
    END IF;
    RETURN NULL;
END
$$;

-- Trigger: an invoke job that names only its run gets the run's tenant and priority.
CREATE FUNCTION stepgate.invoke_job_of_run() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    r record;
BEGIN
    SELECT tenant, priority INTO r FROM stepgate.run WHERE id = (NEW.args->>'run_id')::uuid;
    IF FOUND THEN
        NEW.priority := r.priority;
        NEW.args := NEW.args || jsonb_build_object('tenant', r.tenant);
    END IF;
    RETURN NEW;
END
$$;

-- The running total of a run's journal bytes below seq (the nearest entry below it).
CREATE FUNCTION stepgate.journal_bytes_before(run uuid, seq integer) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce((SELECT p.journal_bytes FROM stepgate.journal_entry p
                     WHERE p.run_id = run AND p.seq < journal_bytes_before.seq
                     ORDER BY p.seq DESC LIMIT 1), 0)
$$;

GRANT ALL ON FUNCTION stepgate.journal_bytes_before(run uuid, seq integer) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.journal_bytes_before(run uuid, seq integer) TO stepgate_system;

-- Trigger: a child's end journaled in its waiting parent, which is made due when it waited for it.
CREATE FUNCTION stepgate.wake_parent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    p record;
    size bigint;
    output jsonb := CASE WHEN NEW.status = 'completed' THEN coalesce(NEW.output, 'null') END;
    error jsonb := CASE WHEN NEW.status <> 'completed' THEN NEW.error END;
BEGIN
    SELECT r.id, r.invocation, r.awaiting INTO p FROM stepgate.run r
    WHERE r.id = NEW.parent_id AND r.tenant = NEW.tenant
      AND r.status = 'suspended' AND r.wake_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    size := octet_length(coalesce(output, error)::text);
    INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, error, invocation, started_at, journal_bytes)
    VALUES (p.id, NEW.parent_seq, 'invoke', NEW.parent_name, output, error, p.invocation, NEW.created_at,
            stepgate.journal_bytes_before(p.id, NEW.parent_seq) + size)
    ON CONFLICT (run_id, seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A sibling that ended first sits above this entry: its total gains this one's bytes.
    UPDATE stepgate.journal_entry SET journal_bytes = journal_bytes + size
    WHERE run_id = p.id AND seq > NEW.parent_seq;
    IF p.awaiting->>'kind' = 'invoke_all' AND (
        SELECT count(*) FROM stepgate.journal_entry j
        WHERE j.run_id = p.id AND j.seq >= (p.awaiting->>'seq')::int
          AND j.seq < (p.awaiting->>'seq')::int + (p.awaiting->>'count')::int
    ) < (p.awaiting->>'count')::int THEN
        RETURN NULL;
    END IF;
    UPDATE stepgate.run SET wake_at = now() WHERE id = p.id;
    RETURN NULL;
END
$$;

-- ======================================================================================
-- Functions: Waits and their matching
-- ======================================================================================

-- A match value as both sides key it; NULL for what matches nothing.
CREATE FUNCTION stepgate.match_scalar(v jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE jsonb_typeof(v)
        WHEN 'number' THEN to_jsonb(trim_scale((v #>> '{}')::numeric))
        WHEN 'string' THEN v WHEN 'boolean' THEN v WHEN 'null' THEN v
    END
$$;

GRANT ALL ON FUNCTION stepgate.match_scalar(v jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.match_scalar(v jsonb) TO stepgate_system;

-- The key of an event document for one shape (sorted paths), or NULL.
CREATE FUNCTION stepgate.match_key(paths text[], doc jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN count(v) = cardinality(paths) THEN coalesce(jsonb_object_agg(p, v), '{}')::text END
    FROM (SELECT p, stepgate.match_scalar(doc #> string_to_array(p, '.')) AS v FROM unnest(paths) p) s
$$;

GRANT ALL ON FUNCTION stepgate.match_key(paths text[], doc jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.match_key(paths text[], doc jsonb) TO stepgate_system;

-- The key of a run's match object.
CREATE FUNCTION stepgate.match_of(m jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(jsonb_object_agg(key, stepgate.match_scalar(value)), '{}')::text
    FROM jsonb_each(m)
$$;

GRANT ALL ON FUNCTION stepgate.match_of(m jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.match_of(m jsonb) TO stepgate_system;

-- The kind of the entry that ends a wait of kind kind, alternative alt.
CREATE FUNCTION stepgate.wait_kind(alt smallint, kind text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN alt < 0 THEN kind ELSE 'wait_any' END
$$;

GRANT ALL ON FUNCTION stepgate.wait_kind(alt smallint, kind text) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.wait_kind(alt smallint, kind text) TO stepgate_system;

-- The transaction lock id of a wait's key, or of an event name when key is NULL.
CREATE FUNCTION stepgate.wait_lock(tenant text, event_name text, key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT hashtextextended(tenant || chr(1) || event_name || chr(1) || coalesce(key, ''), 2020)
$$;

GRANT ALL ON FUNCTION stepgate.wait_lock(tenant text, event_name text, key text) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.wait_lock(tenant text, event_name text, key text) TO stepgate_system;

-- The output of that entry.
CREATE FUNCTION stepgate.wait_output(alt smallint, kind text, output jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN alt < 0 THEN output
        ELSE jsonb_build_object('index', alt, 'kind', kind, 'output', output) END
$$;

GRANT ALL ON FUNCTION stepgate.wait_output(alt smallint, kind text, output jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.wait_output(alt smallint, kind text, output jsonb) TO stepgate_system;

-- The output journaled for a resolved or rejected callback.
CREATE FUNCTION stepgate.callback_result(state text, payload jsonb, error jsonb, resolver text, resolved_by jsonb, resolved_at timestamp with time zone) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT CASE state WHEN 'resolved' THEN jsonb_build_object('data', coalesce(payload, 'null'::jsonb))
                      ELSE jsonb_build_object('error', error) END
        || jsonb_build_object('resolver', resolver, 'resolved_at', resolved_at)
        || CASE WHEN resolved_by IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('resolved_by', resolved_by) END
$$;

GRANT ALL ON FUNCTION stepgate.callback_result(state text, payload jsonb, error jsonb, resolver text, resolved_by jsonb, resolved_at timestamp with time zone) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.callback_result(state text, payload jsonb, error jsonb, resolver text, resolved_by jsonb, resolved_at timestamp with time zone) TO stepgate_system;

-- Whether a revision's config lets an identity with roles invoke it.
CREATE FUNCTION stepgate.may_invoke(config jsonb, checked boolean, roles text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT NOT checked
        OR coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(config->'invoke_roles') = 'array'
                                            THEN config->'invoke_roles' END), 0) = 0
        OR config->'invoke_roles' ?| roles
$$;

GRANT ALL ON FUNCTION stepgate.may_invoke(config jsonb, checked boolean, roles text[]) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.may_invoke(config jsonb, checked boolean, roles text[]) TO stepgate_system;

-- Whether the sender of an event or a message may resume a run of the revision.
CREATE FUNCTION stepgate.may_resume(config jsonb, identity jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT stepgate.may_invoke(config, NOT (roles @> ARRAY['admin']), roles)
        OR coalesce(jsonb_typeof(config->'resume_roles') = 'array' AND config->'resume_roles' ?| roles, false)
    FROM (SELECT ARRAY(SELECT jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(identity->'roles') = 'array' THEN identity->'roles' ELSE '[]' END)) AS roles) sender
$$;

GRANT ALL ON FUNCTION stepgate.may_resume(config jsonb, identity jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.may_resume(config jsonb, identity jsonb) TO stepgate_system;

-- ======================================================================================
-- Functions: Concurrency limits (docs/concurrency.md)
-- ======================================================================================

-- How many tickets a key of limit lim has: 0 for a key with a counter row.
CREATE FUNCTION stepgate.slot_tickets(lim integer) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN lim >= 64 THEN least(32, lim / 2) ELSE 0 END
$$;

-- The order in which a run's keys are claimed and released: by key.
CREATE FUNCTION stepgate.slot_order(keys text[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF cardinality(keys) = 1 THEN
        RETURN '{1}';
    END IF;
    RETURN ARRAY(SELECT u.ord FROM unnest(keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key);
END
$$;

-- A run's concurrency keys, from its revision's config, input and identity; NULL for none.
CREATE FUNCTION stepgate.slot_keys(config jsonb, input jsonb, identity jsonb) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    limits jsonb := config->'concurrency';
    keys text[] := '{}';
    expr text;
    path text[];
    x text;
BEGIN
    IF jsonb_typeof(limits) IS DISTINCT FROM 'array' OR jsonb_array_length(limits) = 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 0 .. jsonb_array_length(limits) - 1 LOOP
        expr := limits->i->>'key';
        IF expr IS NULL THEN
            keys := keys || ''::text;
            CONTINUE;
        END IF;
        path := string_to_array(expr, '.');
        x := coalesce(CASE path[1]
            WHEN 'input' THEN input #>> path[2:]
            WHEN 'identity' THEN identity #>> path[2:] END, '');
        IF octet_length(x) > 200 THEN
            x := 'md5:' || md5(x);
        END IF;
        keys := keys || (expr || '=' || x);
    END LOOP;
    RETURN keys;
END
$$;

-- The limits of those keys.
CREATE FUNCTION stepgate.slot_limits(config jsonb) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    limits jsonb := config->'concurrency';
    lims integer[] := '{}';
BEGIN
    IF jsonb_typeof(limits) IS DISTINCT FROM 'array' OR jsonb_array_length(limits) = 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 0 .. jsonb_array_length(limits) - 1 LOOP
        lims := lims || (limits->i->>'limit')::integer;
    END LOOP;
    RETURN lims;
END
$$;

-- The advisory lock id of a key's hold lock.
CREATE FUNCTION stepgate.slot_hold_lock(p_tenant text, p_function text, p_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT hashtextextended(p_tenant || E'\x1f' || p_function || E'\x1f' || p_key, 37)
$$;

-- The advisory lock id of ticket p_ticket of a key.
CREATE FUNCTION stepgate.slot_ticket_lock(p_tenant text, p_function text, p_key text, p_ticket integer) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT hashtextextended(p_tenant || E'\x1f' || p_function || E'\x1f' || p_key, 4096 + p_ticket)
$$;

-- The running runs that hold a slot of key, counted up to lim.
CREATE FUNCTION stepgate.slot_running(p_tenant text, p_function text, p_key text, lim integer) RETURNS integer
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT count(*) FROM (
        SELECT 1 FROM stepgate.run r
        WHERE r.tenant = p_tenant AND r.function = p_function AND r.status = 'running'
          AND r.slot_keys IS NOT NULL AND p_key = ANY (r.slot_keys)
        LIMIT lim) c);
END
$$;

-- The runs waiting in key's line older than the given one, counted up to lim.
CREATE FUNCTION stepgate.slot_line_ahead(p_tenant text, p_function text, p_key text, p_created_at timestamp with time zone, p_id uuid, lim integer) RETURNS integer
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT count(*) FROM (
        SELECT 1 FROM stepgate.run q
        WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = p_key
          AND q.status IN ('queued', 'scheduled', 'suspended')
          AND (q.created_at, q.id) < (p_created_at, p_id)
        LIMIT lim) older);
END
$$;

-- What a fast claim reads: the running runs up to lim, and whether an older run waits.
CREATE FUNCTION stepgate.slot_fast_count(p_tenant text, p_function text, p_key text, lim integer, p_created_at timestamp with time zone, p_id uuid) RETURNS TABLE(running integer, line boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT (SELECT count(*)::integer FROM (
            SELECT 1 FROM stepgate.run r
            WHERE r.tenant = p_tenant AND r.function = p_function AND r.status = 'running'
              AND r.slot_keys IS NOT NULL AND p_key = ANY (r.slot_keys)
            LIMIT lim) c),
        EXISTS (SELECT 1 FROM stepgate.run q
            WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = p_key
              AND q.status IN ('queued', 'scheduled', 'suspended')
              AND (q.created_at, q.id) < (p_created_at, p_id))
$$;

-- Gives a counter key's slot back.
CREATE FUNCTION stepgate.give_slot(p_tenant text, p_function text, p_key text, p_stripe smallint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE stepgate.concurrency_slot SET running = running - 1
    WHERE tenant = p_tenant AND function = p_function AND key = p_key AND stripe = coalesce(p_stripe, 0)
      AND running > 0;
END
$$;

-- Why a run waits for key, for people.
CREATE FUNCTION stepgate.held_reason(key text, lim integer) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN key = '' THEN format('waiting for one of the function''s %s concurrency slots', lim)
        ELSE format('waiting for a concurrency slot of key %s (limit %s)', key, lim) END
$$;

-- Wakes the runs waiting in key's line that its free slots can take.
CREATE FUNCTION stepgate.refill_slot(p_tenant text, p_function text, p_key text, p_released boolean, p_lim integer DEFAULT NULL::integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_running integer;
    v_lim integer := p_lim;
    v_woken integer;
    v_counted boolean;
    q record;
BEGIN
    IF v_lim IS NULL THEN
        SELECT max(lim) INTO v_lim FROM stepgate.concurrency_slot
        WHERE tenant = p_tenant AND function = p_function AND key = p_key;
    END IF;
    IF v_lim IS NULL THEN
        SELECT l.slot_limits[array_position(l.slot_keys, p_key)] INTO v_lim FROM stepgate.run l
        WHERE l.tenant = p_tenant AND l.function = p_function AND l.held_on = p_key
          AND l.status IN ('queued', 'scheduled', 'suspended')
        ORDER BY l.created_at, l.id LIMIT 1;
    END IF;
    v_counted := stepgate.slot_tickets(coalesce(v_lim, 1)) > 0;
    IF v_counted THEN
        PERFORM pg_advisory_xact_lock_shared(stepgate.slot_hold_lock(p_tenant, p_function, p_key));
    END IF;
    IF p_released AND NOT EXISTS (
        SELECT 1 FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended')) THEN
        RETURN;
    END IF;
    IF NOT v_counted THEN
        -- The row lock orders refills of one key with its claims and releases.
        SELECT running, lim INTO v_running, v_lim FROM stepgate.concurrency_slot
        WHERE tenant = p_tenant AND function = p_function AND key = p_key AND stripe = 0
        FOR UPDATE;
        SELECT count(*) INTO v_woken FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity';
    ELSE
        -- The running runs and the runs woken already, from one snapshot: a concurrent
        -- refill's freed slot and its wakes are seen together or not at all (then the
        -- runs it wakes are locked by it, and skipped below).
        SELECT stepgate.slot_running(p_tenant, p_function, p_key, v_lim),
            (SELECT count(*) FROM stepgate.run
                WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
                  AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity')
        INTO v_running, v_woken;
    END IF;
    v_running := coalesce(v_running, 0);
    FOR q IN
        SELECT id, slot_keys, slot_limits FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at = 'infinity'
        ORDER BY created_at, id
        FOR UPDATE
    LOOP
        EXIT WHEN v_running + v_woken >= coalesce(q.slot_limits[array_position(q.slot_keys, p_key)], v_lim, 1);
        UPDATE stepgate.run SET wake_at = now() WHERE id = q.id;
        PERFORM pg_notify('stepgate_slot_free', q.id::text);
        v_woken := v_woken + 1;
    END LOOP;
END
$$;

-- The backstop of refills: refills up to p_limit keys with a run not woken yet.
CREATE FUNCTION stepgate.refill_held_lines(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    l record;
    n integer := 0;
BEGIN
    FOR l IN
        SELECT DISTINCT tenant, function, held_on FROM stepgate.run
        WHERE held_on IS NOT NULL AND status IN ('queued', 'scheduled', 'suspended') AND wake_at = 'infinity'
        ORDER BY 1, 2, 3
        LIMIT p_limit
    LOOP
        PERFORM stepgate.refill_slot(l.tenant, l.function, l.held_on, false);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Takes a slot of each of a run's keys, or says which key has no room.
CREATE FUNCTION stepgate.take_slots(p_tenant text, p_function text, p_keys text[], p_limits integer[], p_created_at timestamp with time zone, p_id uuid, p_create boolean) RETURNS stepgate.slots_taken
    LANGUAGE plpgsql
    AS $$
DECLARE
    stripes smallint[];
    i integer;
    j integer;
    k text;
    v_lim integer;
    n integer;
    got integer;
    v_running integer;
    v_ahead integer;
    v_line boolean;
    ticket boolean;
    off integer := floor(random() * 32)::integer;
BEGIN
    IF p_keys IS NULL THEN
        RETURN (NULL, NULL)::stepgate.slots_taken;
    END IF;
    stripes := array_fill(NULL::smallint, ARRAY[cardinality(p_keys)]);
    FOREACH i IN ARRAY CASE WHEN cardinality(p_keys) = 1 THEN '{1}'::integer[] ELSE stepgate.slot_order(p_keys) END LOOP
        k := p_keys[i];
        v_lim := p_limits[i];
        n := stepgate.slot_tickets(v_lim);
        got := NULL;
        IF n = 0 THEN
            -- One row, as in 0029: taken by an upsert that re-checks the count on the
            -- row's newest version and locks it (a concurrent claim of the key waits
            -- for this one's commit, then sees its increment); then the older runs in
            -- the key's line, read under that lock, may give it back.
            INSERT INTO stepgate.concurrency_slot AS s (tenant, function, key, stripe, running, lim)
            VALUES (p_tenant, p_function, k, 0, 1, v_lim)
            ON CONFLICT (tenant, function, key, stripe) DO UPDATE
                SET running = s.running + 1, lim = excluded.lim
                WHERE s.running < excluded.lim
            RETURNING s.running INTO v_running;
            IF FOUND THEN
                got := 0;
                v_ahead := stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, v_lim);
                IF v_running + v_ahead > v_lim THEN
                    PERFORM stepgate.give_slot(p_tenant, p_function, k, 0::smallint);
                    got := NULL;
                END IF;
            END IF;
        ELSE
            ticket := false;
            v_line := false;
            v_running := 0;
            IF NOT p_create THEN
                -- Far from the limit, by a count without a ticket (a claim that would then
                -- count too many holding one could not wait).
                SELECT f.running, f.line INTO v_running, v_line
                FROM stepgate.slot_fast_count(p_tenant, p_function, k, v_lim - n, p_created_at, p_id) f;
            END IF;
            IF NOT v_line AND v_running < v_lim - n THEN
                -- The fast claim: a ticket, then the count under it.
                FOR j IN 0 .. n - 1 LOOP
                    IF pg_try_advisory_xact_lock(stepgate.slot_ticket_lock(p_tenant, p_function, k, (off + j) % n)) THEN
                        ticket := true;
                        EXIT;
                    END IF;
                END LOOP;
                IF ticket THEN
                    SELECT f.running, f.line INTO v_running, v_line
                    FROM stepgate.slot_fast_count(p_tenant, p_function, k, v_lim - n, p_created_at, p_id) f;
                    IF NOT v_line AND v_running < v_lim - n THEN
                        got := 0;
                    END IF;
                END IF;
            END IF;
            IF got IS NULL AND NOT p_create THEN
                -- The exact claim, one at a time under the hold lock, with every ticket.
                IF ticket THEN
                    IF NOT pg_try_advisory_xact_lock(stepgate.slot_hold_lock(p_tenant, p_function, k)) THEN
                        RAISE EXCEPTION 'concurrency key % of % is being claimed exactly; claim again', k, p_function
                            USING ERRCODE = 'SGRTY';
                    END IF;
                ELSE
                    PERFORM pg_advisory_xact_lock(stepgate.slot_hold_lock(p_tenant, p_function, k));
                END IF;
                FOR j IN 0 .. n - 1 LOOP
                    PERFORM pg_advisory_xact_lock(stepgate.slot_ticket_lock(p_tenant, p_function, k, j));
                END LOOP;
                v_running := stepgate.slot_running(p_tenant, p_function, k, v_lim);
                v_ahead := stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, v_lim);
                IF v_running + v_ahead < v_lim THEN
                    got := 0;
                END IF;
            END IF;
        END IF;
        IF got IS NULL THEN
            -- Give back the counter rows taken: they are locked by this transaction, so
            -- nobody saw them change. A counted key has nothing to give back.
            FOR j IN 1 .. cardinality(stripes) LOOP
                IF stripes[j] IS NOT NULL AND stepgate.slot_tickets(p_limits[j]) = 0 THEN
                    PERFORM stepgate.give_slot(p_tenant, p_function, p_keys[j], stripes[j]);
                END IF;
            END LOOP;
            RETURN (i, NULL)::stepgate.slots_taken;
        END IF;
        stripes[i] := got;
    END LOOP;
    RETURN (NULL, stripes)::stepgate.slots_taken;
END
$$;

-- Trigger: gives back a run's slots when it leaves running, and wakes who can take them.
CREATE FUNCTION stepgate.release_slots() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    i integer;
    k text;
    v_locked text;
BEGIN
    IF OLD.status <> 'running' THEN
        PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, OLD.held_on, false);
        RETURN NULL;
    END IF;
    FOREACH i IN ARRAY CASE WHEN cardinality(NEW.slot_keys) = 1 THEN '{1}'::integer[] ELSE stepgate.slot_order(NEW.slot_keys) END LOOP
        k := NEW.slot_keys[i];
        IF stepgate.slot_tickets(coalesce(NEW.slot_limits[i], 1)) > 0 THEN
            v_locked := pg_advisory_xact_lock_shared(stepgate.slot_hold_lock(NEW.tenant, NEW.function, k))::text;
        ELSE
            UPDATE stepgate.concurrency_slot s SET running = s.running - 1
            WHERE s.tenant = NEW.tenant AND s.function = NEW.function AND s.key = k
              AND s.stripe = 0 AND s.running > 0;
        END IF;
        IF EXISTS (
            SELECT 1 FROM stepgate.run
            WHERE tenant = NEW.tenant AND function = NEW.function AND held_on = k
              AND status IN ('queued', 'scheduled', 'suspended')) THEN
            PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, k, false, NEW.slot_limits[i]);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- A limited run's claim: its slots taken, or the run held.
CREATE FUNCTION stepgate.claim_slots(p_run uuid, OUT held text, OUT stripes smallint[]) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    r record;
    k text;
    j integer;
    blocked integer;
    due boolean;
BEGIN
    SELECT id, tenant, function, created_at, slot_keys, slot_limits INTO r FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()));
    IF NOT FOUND THEN
        held := '';
        RETURN;
    END IF;
    SELECT t.blocked, t.stripes INTO blocked, stripes
    FROM stepgate.take_slots(r.tenant, r.function, r.slot_keys, r.slot_limits, r.created_at, r.id, false) t;
    -- The run's lock; it may have been claimed meanwhile.
    PERFORM 1 FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()))
    FOR UPDATE;
    due := FOUND;
    IF NOT due AND stripes IS NOT NULL THEN
        -- Give back the counter rows taken: they are locked by this transaction, so
        -- nobody saw them change.
        FOR j IN 1 .. cardinality(stripes) LOOP
            IF stepgate.slot_tickets(r.slot_limits[j]) = 0 THEN
                PERFORM stepgate.give_slot(r.tenant, r.function, r.slot_keys[j], stripes[j]);
            END IF;
        END LOOP;
    END IF;
    IF NOT due THEN
        held := '';
        stripes := NULL;
        RETURN;
    END IF;
    IF blocked IS NULL THEN
        RETURN;
    END IF;
    held := stepgate.held_reason(r.slot_keys[blocked], r.slot_limits[blocked]);
    UPDATE stepgate.run SET held = claim_slots.held, held_on = r.slot_keys[blocked], wake_at = 'infinity',
        status = CASE WHEN status = 'scheduled' THEN 'queued' ELSE status END
    WHERE id = p_run;
    -- Pass on what this run leaves: a slot it was woken for.
    FOR k IN SELECT unnest(r.slot_keys) ORDER BY 1 LOOP
        PERFORM stepgate.refill_slot(r.tenant, r.function, k, false);
    END LOOP;
END
$$;

-- ======================================================================================
-- Functions: Tenant usage
-- ======================================================================================

-- Adds to a tenant's usage, in the stripe of the connection.
CREATE FUNCTION stepgate.usage_add(t text, d_runs bigint, d_stream bigint, d_mailbox bigint) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, runs, stream_bytes, mailbox_bytes)
    VALUES (t, pg_backend_pid() % 32, d_runs, d_stream, d_mailbox)
    ON CONFLICT (tenant, stripe) DO UPDATE SET runs = u.runs + excluded.runs,
        stream_bytes = u.stream_bytes + excluded.stream_bytes,
        mailbox_bytes = u.mailbox_bytes + excluded.mailbox_bytes
$$;

-- Trigger (per statement): runs inserted, by tenant.
CREATE FUNCTION stepgate.usage_runs_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM stepgate.usage_add(tenant, count(*), 0, 0) FROM new_runs GROUP BY tenant;
    RETURN NULL;
END
$$;

-- Trigger (per statement): runs deleted, by tenant.
CREATE FUNCTION stepgate.usage_runs_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM stepgate.usage_add(tenant, -count(*), 0, 0) FROM old_runs GROUP BY tenant;
    RETURN NULL;
END
$$;

-- Trigger: a message stored unconsumed, consumed or deleted.
CREATE FUNCTION stepgate.usage_message_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM stepgate.usage_add(NEW.tenant, 0, 0, octet_length(NEW.data::text));
    ELSE
        PERFORM stepgate.usage_add(OLD.tenant, 0, 0, -octet_length(OLD.data::text));
    END IF;
    RETURN NULL;
END
$$;

-- Trigger: a stream's bytes grown, or the stream deleted.
CREATE FUNCTION stepgate.usage_stream_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM stepgate.usage_add(OLD.tenant, 0, -OLD.bytes, 0);
    ELSE
        PERFORM stepgate.usage_add(NEW.tenant, 0, NEW.bytes - OLD.bytes, 0);
    END IF;
    RETURN NULL;
END
$$;

-- ======================================================================================
-- Triggers: docs/internals.md says what each does.
-- ======================================================================================

CREATE TRIGGER invoke_job_of_run BEFORE INSERT ON river_job FOR EACH ROW WHEN (((new.kind = 'stepgate.invoke'::text) AND (NOT (new.args ? 'tenant'::text)))) EXECUTE FUNCTION stepgate.invoke_job_of_run();

CREATE TRIGGER child_end_wakes_parent AFTER UPDATE OF status ON stepgate.run FOR EACH ROW WHEN (((new.parent_seq IS NOT NULL) AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION stepgate.wake_parent();

CREATE TRIGGER journal_entry_is_immutable BEFORE UPDATE ON stepgate.journal_entry FOR EACH ROW EXECUTE FUNCTION stepgate.refuse_journal_update();

CREATE TRIGGER message_usage_on_consume AFTER UPDATE OF consumed_seq ON stepgate.message FOR EACH ROW WHEN (((old.consumed_seq IS NULL) AND (new.consumed_seq IS NOT NULL))) EXECUTE FUNCTION stepgate.usage_message_changed();

CREATE TRIGGER message_usage_on_delete AFTER DELETE ON stepgate.message FOR EACH ROW WHEN ((old.consumed_seq IS NULL)) EXECUTE FUNCTION stepgate.usage_message_changed();

CREATE TRIGGER message_usage_on_insert AFTER INSERT ON stepgate.message FOR EACH ROW WHEN ((new.consumed_seq IS NULL)) EXECUTE FUNCTION stepgate.usage_message_changed();

CREATE TRIGGER run_event_on_insert AFTER INSERT ON stepgate.run FOR EACH ROW EXECUTE FUNCTION stepgate.notify_run_event();

CREATE TRIGGER run_event_on_status AFTER UPDATE OF status ON stepgate.run FOR EACH ROW WHEN ((old.status IS DISTINCT FROM new.status)) EXECUTE FUNCTION stepgate.notify_run_event();

CREATE TRIGGER run_releases_slots AFTER UPDATE OF status ON stepgate.run FOR EACH ROW WHEN ((((old.status = 'running'::text) AND (new.status <> 'running'::text) AND (new.slot_keys IS NOT NULL)) OR ((old.held_on IS NOT NULL) AND (old.wake_at < 'infinity'::timestamp with time zone) AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) AND (old.status = ANY (ARRAY['queued'::text, 'scheduled'::text, 'suspended'::text]))))) EXECUTE FUNCTION stepgate.release_slots();

CREATE TRIGGER run_terminal_is_final BEFORE UPDATE ON stepgate.run FOR EACH ROW WHEN ((old.status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text]))) EXECUTE FUNCTION stepgate.refuse_terminal_run_update();

CREATE TRIGGER run_usage_on_delete AFTER DELETE ON stepgate.run REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION stepgate.usage_runs_deleted();

CREATE TRIGGER run_usage_on_insert AFTER INSERT ON stepgate.run REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION stepgate.usage_runs_inserted();

CREATE TRIGGER stream_usage_on_delete AFTER DELETE ON stepgate.stream FOR EACH ROW WHEN ((old.bytes <> 0)) EXECUTE FUNCTION stepgate.usage_stream_changed();

CREATE TRIGGER stream_usage_on_update AFTER UPDATE OF bytes ON stepgate.stream FOR EACH ROW WHEN ((new.bytes <> old.bytes)) EXECUTE FUNCTION stepgate.usage_stream_changed();
