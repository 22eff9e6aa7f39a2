-- Callbacks (entry kind callback, await await_callback): a run makes a callback, the
-- gateway gives it an unguessable token (256 random bits) and a URL, and anyone holding
-- the token resolves it once, with a JSON payload, or rejects it with an error; a JWT
-- caller with runs:manage may do the same by run id and callback name.
--
-- Only the token's SHA-256 is stored here (the lookup of POST /v1/callbacks/{token}).
-- A callback is resolved at most once: its row is locked (FOR UPDATE), after its run's
-- row, by the resolution and by the await that reads it, so whichever commits first the
-- other sees. A resolution that comes before the await is kept on the row, and the
-- await journals it at once; one that comes while the run waits (a run_wait row of kind
-- await_callback whose callback_seq is the callback's seq) journals it at the wait's seq,
-- deletes the wait and makes the run due, in its own transaction.
CREATE TABLE stepgate.callback (
    run_id      uuid        NOT NULL REFERENCES stepgate.run (id) ON DELETE CASCADE,
    seq         integer     NOT NULL,
    tenant      text        NOT NULL,
    name        text        NOT NULL,
    token_hash  bytea       NOT NULL UNIQUE,
    state       text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'resolved', 'rejected')),
    payload     jsonb,
    error       jsonb,
    -- resolver says who resolved it: 'token' (the URL's holder; resolved_by is NULL) or
    -- 'identity' (a JWT caller by run id; resolved_by is the caller's identity).
    resolver    text        CHECK (resolver IN ('token', 'identity')),
    resolved_by jsonb,
    -- awaited_seq is the seq of the await_callback that waits for it, once one was stored.
    awaited_seq integer,
    created_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq),
    CONSTRAINT callback_resolved CHECK ((state = 'pending') = (resolved_at IS NULL AND resolver IS NULL))
);
-- A run's callback by name: the latest one of that name is the one resolved by name.
CREATE INDEX callback_by_name ON stepgate.callback (run_id, name, seq);

-- The wait of an await_callback names the callback it waits for.
ALTER TABLE stepgate.run_wait ADD COLUMN callback_seq integer,
    ADD CONSTRAINT run_wait_callback CHECK (kind <> 'await_callback' OR callback_seq IS NOT NULL);

-- Tenant isolation, as migration 0004 sets it up for every table.
GRANT SELECT, INSERT, UPDATE ON stepgate.callback TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.callback ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.callback TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.callback TO stepgate_system USING (true);

-- callback_result: the output journaled for a resolved or rejected callback, at the seq
-- of the await_callback that waits for it: {"data": payload} or {"error": {type,
-- message}}, with "resolver", "resolved_at" and, for an identity, "resolved_by".
CREATE FUNCTION stepgate.callback_result(state text, payload jsonb, error jsonb, resolver text,
    resolved_by jsonb, resolved_at timestamptz) RETURNS jsonb
-- STABLE: a timestamptz's text depends on the session's TimeZone.
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE state WHEN 'resolved' THEN jsonb_build_object('data', coalesce(payload, 'null'::jsonb))
                      ELSE jsonb_build_object('error', error) END
        || jsonb_build_object('resolver', resolver, 'resolved_at', resolved_at)
        || CASE WHEN resolved_by IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('resolved_by', resolved_by) END
$$;
GRANT EXECUTE ON FUNCTION stepgate.callback_result(text, jsonb, jsonb, text, jsonb, timestamptz)
    TO stepgate_app, stepgate_system;
