-- Bulk redrive (POST /v1/runs/rerun) and the dead-letter view (GET /v1/failures).

-- An operation is a bulk cancel or a bulk rerun ("redrive"), and may be cancelled by its
-- tenant (POST /v1/operations/{id}/cancel). cancelled counts the runs the operation has
-- done: cancelled by a cancel, rerun by a rerun. failed counts the runs a rerun could not
-- rerun, errors holds a sample of why (at most 20 {run_id, error}), options a rerun's
-- start point ({"from": "start"|"failure", "from_seq": N}). (after_created_at, after_id)
-- is where a rerun's walk over runs by (created_at, id) has reached, committed with each
-- batch, so that a retried job goes on from there.
ALTER TABLE stepgate.operation DROP CONSTRAINT operation_kind_check,
    ADD CONSTRAINT operation_kind_check CHECK (kind IN ('cancel', 'rerun')),
    DROP CONSTRAINT operation_status_check,
    ADD CONSTRAINT operation_status_check CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    ADD COLUMN failed bigint NOT NULL DEFAULT 0,
    ADD COLUMN errors jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN options jsonb,
    ADD COLUMN cancelled_by jsonb,
    ADD COLUMN after_created_at timestamptz,
    ADD COLUMN after_id uuid;

-- Each run a rerun operation took: the run it made (new_run_id), or why it made none
-- (error), written in the batch's transaction with the new runs and the operation's
-- position. The key makes a rerun operation idempotent per run: a batch that would take
-- a run again fails whole.
CREATE TABLE stepgate.operation_run (
    tenant text NOT NULL,
    operation_id uuid NOT NULL REFERENCES stepgate.operation (id) ON DELETE CASCADE,
    run_id uuid NOT NULL,
    new_run_id uuid,
    error text,
    PRIMARY KEY (tenant, operation_id, run_id),
    CHECK ((new_run_id IS NULL) <> (error IS NULL))
);

ALTER TABLE stepgate.operation_run ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.operation_run TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.operation_run TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT ON TABLE stepgate.operation_run TO stepgate_app;
GRANT SELECT,INSERT,DELETE ON TABLE stepgate.operation_run TO stepgate_system;

-- The reruns of a run (the run read's rerun_by).
CREATE INDEX run_rerun_of ON stepgate.run USING btree (tenant, rerun_of) WHERE (rerun_of IS NOT NULL);

-- A tenant's failed runs by when they failed: the dead-letter view's window.
CREATE INDEX run_failed ON stepgate.run USING btree (tenant, finished_at) WHERE (status = 'failed'::text);

-- error_message_shape is an error message with what varies between occurrences of the same
-- failure replaced by placeholders, in this order: quoted strings ("..." or '...') by
-- <str>, UUIDs by <uuid>, hex ids (0x followed by hex digits, or 8 or more hex digits with
-- a digit among them) by <hex>, numbers (digits, with a decimal part) by <num>. Only the
-- first 1000 characters count. "order 42 not found: \"a-1\"" is "order <num> not found: <str>".
CREATE FUNCTION stepgate.error_message_shape(message text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
SELECT regexp_replace(
    regexp_replace(
        regexp_replace(
            regexp_replace(left(coalesce(message, ''), 1000),
                '"[^"]*"|''[^'']*''', '<str>', 'g'),
            '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<uuid>', 'gi'),
        '\m(0x[0-9a-f]+|(?=[a-f]*[0-9])[0-9a-f]{8,})\M', '<hex>', 'gi'),
    '[0-9]+(\.[0-9]+)?', '<num>', 'g')
$$;

-- error_group is the key of a failed run's group in the dead-letter view: the first 16 hex
-- digits of the MD5 of its function, its error's type and error_message_shape(its error's
-- message), separated by newlines.
CREATE FUNCTION stepgate.error_group(function text, error jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
SELECT left(md5(function || E'\n' || coalesce(error->>'type', '') || E'\n' || stepgate.error_message_shape(error->>'message')), 16)
$$;

GRANT ALL ON FUNCTION stepgate.error_message_shape(message text) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.error_message_shape(message text) TO stepgate_system;
GRANT ALL ON FUNCTION stepgate.error_group(function text, error jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.error_group(function text, error jsonb) TO stepgate_system;

-- A dismissed group of failures (POST /v1/failures/{group}/dismiss): the view hides the
-- group until one of its runs fails after dismissed_at.
CREATE TABLE stepgate.failure_dismissal (
    tenant text NOT NULL,
    error_group text NOT NULL,
    dismissed_at timestamptz NOT NULL DEFAULT now(),
    by_identity jsonb NOT NULL,
    PRIMARY KEY (tenant, error_group)
);

ALTER TABLE stepgate.failure_dismissal ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.failure_dismissal TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.failure_dismissal TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.failure_dismissal TO stepgate_app;
GRANT SELECT,INSERT,UPDATE,DELETE ON TABLE stepgate.failure_dismissal TO stepgate_system;
