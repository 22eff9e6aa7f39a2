-- Two rules the journal's statements share, as functions rather than SQL text spliced
-- into each statement. Both are plain SQL functions, which Postgres inlines.

-- may_invoke: whether a function revision's config lets a caller with roles start a run
-- of it, as access.Identity.MayInvoke decides: always for an admin (checked = false),
-- else when its invoke_roles is not a non-empty list, or holds one of roles.
CREATE FUNCTION stepgate.may_invoke(config jsonb, checked boolean, roles text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NOT checked
        OR coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(config->'invoke_roles') = 'array'
                                            THEN config->'invoke_roles' END), 0) = 0
        OR config->'invoke_roles' ?| roles
$$;

-- journal_bytes_before: the journal bytes of a run's entries before seq (its entry at
-- seq - 1 holds the running total; 0 for the first).
CREATE FUNCTION stepgate.journal_bytes_before(run uuid, seq integer) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT p.journal_bytes FROM stepgate.journal_entry p
                     WHERE p.run_id = run AND p.seq = journal_bytes_before.seq - 1), 0)
$$;

GRANT EXECUTE ON FUNCTION stepgate.may_invoke(jsonb, boolean, text[]) TO stepgate_app, stepgate_system;
GRANT EXECUTE ON FUNCTION stepgate.journal_bytes_before(uuid, integer) TO stepgate_app, stepgate_system;
