-- Row-level security: the second fence of tenant isolation. The first is the tenant
-- filter in every query of package journal; these policies hold even where a query
-- forgot it.
--
-- The gateway's connections act as one of two roles (journal.ConfigurePool runs SET
-- ROLE), neither of them a superuser, BYPASSRLS or the owner of anything, so the
-- policies apply to them; FORCE makes them apply to the tables' owner too, who has no
-- policy and so sees nothing through them.
--   - stepgate_app, the API pool's: sees the rows of the tenant in the setting
--     stepgate.tenant, which journal.ForTenant sets per transaction
--     (set_config(..., true)); with none set, nothing is visible or writable.
--   - stepgate_system, the system pool's: sees every row. The invoker works by run id
--     (claims, checkpoints, outcomes, the lease reaper, River's jobs).
--
-- The policy of stepgate_app is a plain equality, never an OR: Postgres then merges it
-- with the query's own "tenant = $1" (an equivalence class), checks
-- current_setting = $1 once per query, and keeps its row estimates and index plans.
-- An OR'd escape ("... OR current_setting(...) = '*'") is evaluated on every row and
-- counts the tenant's selectivity twice: listing a tenant's runs then reads all of them
-- and sorts, instead of walking the index for a page. Hence a role for the system pool
-- rather than a '*' tenant.
--
-- journal_entry and attempt_failure have no tenant column: stepgate_app's policy asks
-- the run (one primary key probe per entry read through the API pool). A column would
-- widen every entry, change the invoker's writes and need a foreign key to keep it
-- equal to the run's (another index on run); stepgate_system pays nothing either way.
--
-- A table added later needs its GRANTs to both roles, ENABLE and FORCE ROW LEVEL
-- SECURITY and both policies (journal's TestSchemaIsFenced checks every table). A River
-- upgrade that adds a table needs GRANTs too.

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
-- Least privilege: revisions, journal entries and failures are never updated or deleted
-- by the gateway, runs never deleted.
GRANT SELECT, INSERT, UPDATE, DELETE ON stepgate.function TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT ON stepgate.function_revision TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT, UPDATE ON stepgate.run TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT ON stepgate.journal_entry TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT ON stepgate.attempt_failure TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT, UPDATE, DELETE ON stepgate.run_watch TO stepgate_app, stepgate_system;

-- River's tables, in the schema River migrated into (the first of the search path, as
-- River names its tables unqualified), with no row-level security. Both roles use
-- them: the API pool enqueues a run's job in the run's transaction.
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

ALTER TABLE stepgate.function ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.function_revision ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.run ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.journal_entry ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.attempt_failure ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.run_watch ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- 0003 may have given run_watch a policy for every role with a '*' escape (when the
-- role existed already): this one replaces it.
DROP POLICY IF EXISTS tenant_isolation ON stepgate.run_watch;

-- For every command: USING filters what is read, updated and deleted; the same
-- expression checks what is inserted and what an update leaves. nullif: after a
-- transaction that set it, the setting reads '' rather than NULL, and '' must match no
-- row either.
CREATE POLICY tenant_isolation ON stepgate.function TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY tenant_isolation ON stepgate.function_revision TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY tenant_isolation ON stepgate.run TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY tenant_isolation ON stepgate.run_watch TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY tenant_isolation ON stepgate.journal_entry TO stepgate_app
    USING (EXISTS (
        SELECT 1 FROM stepgate.run r
        WHERE r.id = journal_entry.run_id AND r.tenant = nullif(current_setting('stepgate.tenant', true), '')));
CREATE POLICY tenant_isolation ON stepgate.attempt_failure TO stepgate_app
    USING (EXISTS (
        SELECT 1 FROM stepgate.run r
        WHERE r.id = attempt_failure.run_id AND r.tenant = nullif(current_setting('stepgate.tenant', true), '')));

CREATE POLICY system_access ON stepgate.function TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.function_revision TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.run TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.run_watch TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.journal_entry TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.attempt_failure TO stepgate_system USING (true);
