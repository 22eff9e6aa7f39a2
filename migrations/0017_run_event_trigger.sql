-- Run events (journal.EventChannel) come from triggers, not from a CTE every statement
-- that changes a run's status had to splice in: each statement that inserts runs, or
-- changes the status of some, notifies one event per such run, as JSON (journal.RunEvent),
-- but only for tenants some gateway watches (stepgate.run_watch, unexpired), so that runs
-- nobody watches pay one index probe and no NOTIFY (a NOTIFY serializes commits).
-- Statement-level, with transition tables: one call per statement, whatever its rows.
CREATE FUNCTION stepgate.notify_run_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('stepgate_run_events', json_build_object('id', n.id, 'tenant', n.tenant,
                'function', n.function, 'status', n.status, 'attempts', n.attempts,
                'wake_at', n.wake_at, 'finished_at', n.finished_at)::text)
        FROM new_runs n
        WHERE EXISTS (SELECT 1 FROM stepgate.run_watch w WHERE w.tenant = n.tenant AND w.expires_at > now());
    ELSE
        PERFORM pg_notify('stepgate_run_events', json_build_object('id', n.id, 'tenant', n.tenant,
                'function', n.function, 'status', n.status, 'attempts', n.attempts,
                'wake_at', n.wake_at, 'finished_at', n.finished_at)::text)
        FROM new_runs n JOIN old_runs o USING (id)
        WHERE n.status IS DISTINCT FROM o.status
          AND EXISTS (SELECT 1 FROM stepgate.run_watch w WHERE w.tenant = n.tenant AND w.expires_at > now());
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_events_on_insert AFTER INSERT ON stepgate.run
    REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION stepgate.notify_run_events();
CREATE TRIGGER run_events_on_update AFTER UPDATE ON stepgate.run
    REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION stepgate.notify_run_events();
