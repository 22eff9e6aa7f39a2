-- Published values and streams of a run.
--
-- A value (step.SetValue) is a journal entry of kind 'value', named after its key: the
-- latest entry of a key is its value. This index finds it without walking the journal.
CREATE INDEX journal_entry_value ON stepgate.journal_entry (run_id, name, seq DESC) WHERE kind = 'value';

-- A stream (step.Stream) is an ordered list of chunks a run writes while it runs, read
-- live by clients (GET /v1/runs/{id}/streams/{key}). Its chunks are not journal entries,
-- so a long stream does not eat the journal's bounds. stream is one row per (run, key):
-- its length and bytes, which the bounds check, and its end; a write locks it, which
-- orders the stream's offsets.
CREATE TABLE stepgate.stream (
    tenant     text        NOT NULL,
    run_id     uuid        NOT NULL REFERENCES stepgate.run (id),
    key        text        NOT NULL CHECK (key <> ''),
    length     integer     NOT NULL DEFAULT 0 CHECK (length >= 0),
    bytes      bigint      NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    closed_at  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

-- stream_chunk holds each chunk once, at its offset (pos, from 0). (at_seq, at_attempt,
-- at_index) is where the function wrote it (the step's seq and attempt, or the next seq
-- and 0 between steps, and its count there): a replay or a repeated checkpoint writes a
-- chunk with the same place, which the unique key skips. Chunks are immutable.
CREATE TABLE stepgate.stream_chunk (
    tenant     text        NOT NULL,
    run_id     uuid        NOT NULL,
    key        text        NOT NULL,
    pos        integer     NOT NULL CHECK (pos >= 0),
    data       jsonb       NOT NULL,
    at_seq     integer     NOT NULL,
    at_attempt integer     NOT NULL,
    at_index   integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key, pos),
    UNIQUE (run_id, key, at_seq, at_attempt, at_index),
    FOREIGN KEY (run_id, key) REFERENCES stepgate.stream (run_id, key)
);

-- Tenant isolation, as migration 0004 sets it up for every table. Chunks are never
-- updated or deleted; a stream's row is updated by its writes.
GRANT SELECT, INSERT, UPDATE ON stepgate.stream TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT ON stepgate.stream_chunk TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.stream ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.stream_chunk ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.stream TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY tenant_isolation ON stepgate.stream_chunk TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.stream TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.stream_chunk TO stepgate_system USING (true);
