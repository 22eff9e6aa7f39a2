-- A run can wait for the first of several things (await wait_any): an event, a
-- callback, a message. Each alternative is a run_wait row at the await's seq, numbered by
-- alt (0, 1, ...); a plain wait has alt -1. Whoever resolves an alternative deletes every
-- row at that seq (so the others can no longer resume the run: each resolver locks the
-- run's row first, and only one finds the rows) and journals one entry of kind wait_any
-- whose output says which alternative came and holds what its own entry would:
-- {"index": alt, "kind": "<its kind>", "output": <its output>}. A timeout journals
-- {"timed_out": true}, as for any wait.
ALTER TABLE stepgate.run_wait ADD COLUMN alt smallint NOT NULL DEFAULT -1,
    DROP CONSTRAINT run_wait_pkey,
    ADD PRIMARY KEY (run_id, seq, alt);

-- wait_kind: the kind of the entry that ends a wait of kind kind, alternative alt.
CREATE FUNCTION stepgate.wait_kind(alt smallint, kind text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN alt < 0 THEN kind ELSE 'wait_any' END
$$;

-- wait_output: the output of that entry, when the wait's own entry would hold output.
CREATE FUNCTION stepgate.wait_output(alt smallint, kind text, output jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN alt < 0 THEN output
        ELSE jsonb_build_object('index', alt, 'kind', kind, 'output', output) END
$$;

GRANT EXECUTE ON FUNCTION stepgate.wait_kind(smallint, text), stepgate.wait_output(smallint, text, jsonb)
    TO stepgate_app, stepgate_system;
