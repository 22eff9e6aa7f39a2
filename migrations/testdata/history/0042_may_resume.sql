-- may_resume: whether a function revision's config lets the sender of an event or a
-- message (identity, as stored with the event or message) resume a run of it, as
-- access.Identity.MayResume decides: when the sender may invoke the function
-- (stepgate.may_invoke: an admin, no invoke_roles, or one of them), or holds one of the
-- roles of its resume_roles. Events whose sender may not resume a waiting run do not
-- resume it (journal.ResumeWaiters, the wait's look for an event already stored), and
-- such a sender's messages are refused (journal.SendMessage, journal.SendFromRun).
CREATE FUNCTION stepgate.may_resume(config jsonb, identity jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT stepgate.may_invoke(config, NOT (roles @> ARRAY['admin']), roles)
        OR coalesce(jsonb_typeof(config->'resume_roles') = 'array' AND config->'resume_roles' ?| roles, false)
    FROM (SELECT ARRAY(SELECT jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(identity->'roles') = 'array' THEN identity->'roles' ELSE '[]' END)) AS roles) sender
$$;

GRANT EXECUTE ON FUNCTION stepgate.may_resume(jsonb, jsonb) TO stepgate_app, stepgate_system;
