-- Runs that wait for an event (await wait_event): each waiting run has one row in
-- run_wait, keyed for the event side by (tenant, event name, match), so that finding the
-- runs an event resumes is one index probe per match shape, however many runs wait.
--
-- A match is an object of dotted paths into the event ({"id", "name", "data"}) and the
-- scalar values the run wants there: {"data.order_id": "o-17"}. Its key is the same
-- jsonb computed on both sides: from the run's match (stepgate.match_of) and from an
-- event, for each shape (the sorted paths) that runs of the tenant wait on with that
-- event name (stepgate.match_key over stepgate.wait_shape).
--
-- No event is lost to the race between a run deciding to wait and its wait being stored:
--   * a waiter takes the transaction lock of its key (stepgate.wait_lock) before it
--     looks for a matching event stored since its invocation started; an event's
--     transaction takes the lock of each key it computes before it looks for waiters.
--     Whichever commits first, the other sees it.
--   * a waiter whose shape is new to (tenant, event name) takes the name's lock
--     exclusively before its key's; events take it shared before they read the shapes,
--     so an event never misses a shape that commits with a waiter it could match.
-- A wait row exists only while its run is suspended on it: the event that resumes the
-- run deletes it, the claim of a run whose wait timed out deletes it and journals the
-- timeout, and a cancellation deletes it.
CREATE TABLE stepgate.run_wait (
    run_id     uuid        NOT NULL,
    seq        integer     NOT NULL,
    tenant     text        NOT NULL,
    name       text        NOT NULL,
    -- kind is the await's, and the kind of the entry journaled when the wait times out
    -- (output {"timed_out": true}); later awaits add theirs (a wait_event has an
    -- event_name and a match).
    kind       text        NOT NULL,
    event_name text,
    -- match_key is the wait_event's key: the text of its match, as stepgate.match_of
    -- makes it. Text, whose equality is leakproof, so that the index serves the probe
    -- of an event through the tables' row-level security (jsonb's equality is not
    -- leakproof, and would make the gateway's tenant role scan every wait).
    match_key  text,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq),
    CONSTRAINT run_wait_event CHECK (kind <> 'wait_event' OR (event_name IS NOT NULL AND match_key IS NOT NULL))
);
CREATE INDEX run_wait_by_match ON stepgate.run_wait (tenant, event_name, match_key);

-- The shapes of the matches runs wait on, per tenant and event name: what an event
-- computes keys for. Bounded per (tenant, event name) by the gateway; never deleted (a
-- shape is a few paths).
CREATE TABLE stepgate.wait_shape (
    tenant     text        NOT NULL,
    event_name text        NOT NULL,
    paths      text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, event_name, paths)
);

-- An event "since the invocation started" is found through its name and time.
CREATE INDEX event_by_name ON stepgate.event (tenant, name, created_at);

-- match_scalar: a match value as both sides key it: numbers without trailing zeros
-- (1.0 and 1 are one key), strings, booleans and null as they are; NULL for an object,
-- an array or a missing value, which match nothing.
CREATE FUNCTION stepgate.match_scalar(v jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(v)
        WHEN 'number' THEN to_jsonb(trim_scale((v #>> '{}')::numeric))
        WHEN 'string' THEN v WHEN 'boolean' THEN v WHEN 'null' THEN v
    END
$$;

-- match_of: the key of a run's match object ({path: value}): the text of the jsonb
-- object of its normalized values, whose keys jsonb orders one way.
CREATE FUNCTION stepgate.match_of(m jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(key, stepgate.match_scalar(value)), '{}')::text
    FROM jsonb_each(m)
$$;

-- match_key: the key of an event document for one shape, as match_of makes a run's:
-- {path: the scalar at path}, or NULL when the document has no scalar at one of the
-- paths (it matches no such wait).
CREATE FUNCTION stepgate.match_key(paths text[], doc jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN count(v) = cardinality(paths) THEN coalesce(jsonb_object_agg(p, v), '{}')::text END
    FROM (SELECT p, stepgate.match_scalar(doc #> string_to_array(p, '.')) AS v FROM unnest(paths) p) s
$$;

-- wait_lock: the transaction lock id of a key, or of an event name when key is NULL.
CREATE FUNCTION stepgate.wait_lock(tenant text, event_name text, key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended(tenant || chr(1) || event_name || chr(1) || coalesce(key, ''), 2020)
$$;

GRANT EXECUTE ON FUNCTION stepgate.match_scalar(jsonb), stepgate.match_of(jsonb),
    stepgate.match_key(text[], jsonb), stepgate.wait_lock(text, text, text)
    TO stepgate_app, stepgate_system;

-- Tenant isolation, as migration 0004 sets it up for every table.
GRANT SELECT, INSERT, DELETE ON stepgate.run_wait TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT ON stepgate.wait_shape TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.run_wait ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.wait_shape ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.run_wait TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.run_wait TO stepgate_system USING (true);
CREATE POLICY tenant_isolation ON stepgate.wait_shape TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.wait_shape TO stepgate_system USING (true);
