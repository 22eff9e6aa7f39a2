-- Schedules: a cron expression that starts runs of a function, one per tick.
--
-- next_at is the next tick (database clock). A River job (stepgate.schedule_tick) is
-- scheduled at next_at for (id, generation, next_at); the tick locks the row, checks that
-- it still has that generation and next_at (so a stale, duplicate or already handled
-- tick does nothing), starts the run and moves next_at on, in one transaction.
-- generation counts puts: a put replaces the schedule and strands the older ticks.
CREATE TABLE stepgate.schedule (
    id           uuid        PRIMARY KEY,
    tenant       text        NOT NULL,
    name         text        NOT NULL,
    function     text        NOT NULL,
    cron         text        NOT NULL,
    timezone     text        NOT NULL DEFAULT 'UTC',
    input        jsonb       NOT NULL,
    -- The identity of whoever put the schedule (never a token): its runs carry it.
    identity     jsonb       NOT NULL,
    generation   integer     NOT NULL DEFAULT 1 CHECK (generation > 0),
    next_at      timestamptz NOT NULL,
    last_tick_at timestamptz,
    last_run_id  uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, name)
);

-- Tenant isolation, as migration 0004 sets it up for the other tables.
GRANT SELECT, INSERT, UPDATE, DELETE ON stepgate.schedule TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.schedule ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.schedule TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.schedule TO stepgate_system USING (true);
