-- The durable core: functions and their immutable revisions, runs, journal entries and
-- failed attempts. Guarantees are enforced here, not only in Go: (run_id, seq) is unique
-- and entries are immutable; terminal runs never change; an idempotency key is unique per
-- tenant and function.
CREATE SCHEMA IF NOT EXISTS stepgate;

CREATE TABLE stepgate.function_revision (
    tenant     text        NOT NULL,
    name       text        NOT NULL,
    revision   integer     NOT NULL CHECK (revision > 0),
    url        text        NOT NULL,
    config     jsonb       NOT NULL DEFAULT '{}',
    -- timeout_ms is config.timeout with its default applied, so a run can be created
    -- already leased in one statement.
    timeout_ms bigint      NOT NULL CHECK (timeout_ms > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name, revision)
);

-- The registered functions: each points at its current revision. Deleting a function
-- removes this row only; revisions stay for the runs that use them.
CREATE TABLE stepgate.function (
    tenant     text        NOT NULL,
    name       text        NOT NULL,
    revision   integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name),
    FOREIGN KEY (tenant, name, revision) REFERENCES stepgate.function_revision (tenant, name, revision)
);

CREATE TABLE stepgate.run (
    id              uuid        PRIMARY KEY,
    tenant          text        NOT NULL,
    function        text        NOT NULL,
    revision        integer     NOT NULL,
    status          text        NOT NULL CHECK (status IN ('scheduled', 'queued', 'running', 'suspended', 'completed', 'failed', 'cancelled')),
    input           jsonb       NOT NULL,
    output          jsonb,
    error           jsonb,
    identity        jsonb       NOT NULL,
    idempotency_key text,
    parent_id       uuid,
    -- attempts counts invocations that have started; invocation is the fencing token of the
    -- one that owns the run now, bumped by every claim.
    attempts        integer     NOT NULL DEFAULT 0,
    invocation      integer     NOT NULL DEFAULT 0,
    -- failed_invocations counts failed invocations in a row; the function's retry policy
    -- bounds it, and an invocation that makes progress (suspends) resets it.
    failed_invocations integer  NOT NULL DEFAULT 0,
    -- notify asks the run's terminal update to pg_notify: set when a waiter attaches
    -- from another request, so runs nobody waits on elsewhere pay no notification.
    notify          boolean     NOT NULL DEFAULT false,
    -- lease_until bounds a running invocation: past it, the lease reaper requeues the run.
    lease_until     timestamptz,
    -- wake_at is when a queued (retry backoff) or suspended run is due next.
    wake_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    -- No foreign key to function_revision: revisions are never deleted, and its check
    -- would share-lock one hot revision row on every run created.
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CHECK ((status = 'running') = (lease_until IS NOT NULL))
);

CREATE UNIQUE INDEX run_idempotency_key ON stepgate.run (tenant, function, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX run_by_created ON stepgate.run (tenant, created_at DESC, id DESC);
CREATE INDEX run_by_function ON stepgate.run (tenant, function, created_at DESC, id DESC);
CREATE INDEX run_expired_lease ON stepgate.run (lease_until) WHERE lease_until IS NOT NULL;

-- A terminal run never changes again (a rerun makes a new run).
CREATE FUNCTION stepgate.refuse_terminal_run_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run % is %, terminal runs are immutable', OLD.id, OLD.status
        USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER run_terminal_is_final BEFORE UPDATE ON stepgate.run
    FOR EACH ROW WHEN (OLD.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION stepgate.refuse_terminal_run_update();

CREATE TABLE stepgate.journal_entry (
    run_id      uuid        NOT NULL REFERENCES stepgate.run (id) ON DELETE CASCADE,
    seq         integer     NOT NULL CHECK (seq > 0),
    kind        text        NOT NULL,
    name        text        NOT NULL,
    output      jsonb,
    error       jsonb,
    attempt     integer     NOT NULL DEFAULT 1,
    wake_at     timestamptz,
    invocation  integer     NOT NULL,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- Journal entries are immutable: the first write wins.
CREATE FUNCTION stepgate.refuse_journal_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'journal entry (%, %) is immutable', OLD.run_id, OLD.seq
        USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER journal_entry_is_immutable BEFORE UPDATE ON stepgate.journal_entry
    FOR EACH ROW EXECUTE FUNCTION stepgate.refuse_journal_update();

-- Failed attempts, kept for inspection and never replayed. seq 0 is a whole invocation
-- that failed (bad answer, timeout, refused connection); seq > 0 is a step's attempt.
CREATE TABLE stepgate.attempt_failure (
    run_id     uuid        NOT NULL REFERENCES stepgate.run (id) ON DELETE CASCADE,
    seq        integer     NOT NULL CHECK (seq >= 0),
    attempt    integer     NOT NULL,
    name       text        NOT NULL DEFAULT '',
    error      jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq, attempt)
);
