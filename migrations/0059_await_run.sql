-- await_run: a run waits for another run of its tenant to end (journal.RunWait). The
-- wait is a run_wait row of kind 'await_run' naming the awaited run; the awaited run is
-- marked (run.awaited) under its row lock when the wait is stored, so the trigger
-- run_end_wakes_awaiters fires only for runs somebody awaits: a run nobody awaits pays
-- nothing at its end.
ALTER TABLE stepgate.run ADD COLUMN awaited boolean NOT NULL DEFAULT false;

ALTER TABLE stepgate.run_wait ADD COLUMN awaited_run uuid;
ALTER TABLE stepgate.run_wait ADD CONSTRAINT run_wait_run CHECK (kind <> 'await_run' OR awaited_run IS NOT NULL);
CREATE INDEX run_wait_by_awaited_run ON stepgate.run_wait USING btree (tenant, awaited_run) WHERE awaited_run IS NOT NULL;

-- The output of an await_run's entry: the awaited run's end, or, for a run that is not
-- there (status NULL), not_found.
CREATE FUNCTION stepgate.run_end_output(id uuid, status text, output jsonb, error jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT jsonb_build_object('run', CASE
        WHEN status = 'completed' THEN jsonb_build_object('id', id, 'status', status, 'output', coalesce(output, 'null'::jsonb))
        WHEN status IN ('failed', 'cancelled') THEN jsonb_build_object('id', id, 'status', status, 'error', error)
        ELSE jsonb_build_object('id', id, 'error', jsonb_build_object('type', 'not_found', 'message', 'no run ' || id || ' in the tenant'))
    END)
$$;

-- Resumes the runs waiting for NEW's end (await_run, alone or among a wait_any's
-- alternatives): for each, under its row lock (taken first, as a claim takes it before
-- it deletes a wait that timed out), the wait rows at its seq are deleted, and only the
-- deleter journals the end and makes the run due; every gateway hears of it on
-- stepgate_slot_free (journal.SlotChannel) and claims it, the stranded-run sweep being
-- the backstop.
CREATE FUNCTION stepgate.wake_awaiters() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    w record;
    inv integer;
    out jsonb;
    ended jsonb := stepgate.run_end_output(NEW.id, NEW.status, NEW.output, NEW.error);
BEGIN
    FOR w IN
        SELECT a.tenant, a.run_id, a.seq, a.alt, a.name FROM stepgate.run_wait a
        WHERE a.tenant = NEW.tenant AND a.awaited_run = NEW.id
        ORDER BY a.run_id, a.seq, a.alt
    LOOP
        SELECT r.invocation INTO inv FROM stepgate.run r
        WHERE r.tenant = w.tenant AND r.id = w.run_id AND r.status = 'suspended'
        FOR UPDATE;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        DELETE FROM stepgate.run_wait WHERE tenant = w.tenant AND run_id = w.run_id AND seq = w.seq;
        IF NOT FOUND THEN
            CONTINUE; -- a claim (its timeout) or another resumer took it first
        END IF;
        out := stepgate.wait_output(w.alt, 'await_run', ended);
        INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
        VALUES (w.tenant, w.run_id, w.seq, stepgate.wait_kind(w.alt, 'await_run'), w.name, out, inv, now(),
                stepgate.journal_bytes_before(w.tenant, w.run_id, w.seq) + octet_length(out::text))
        ON CONFLICT (tenant, run_id, seq) DO NOTHING;
        UPDATE stepgate.run SET wake_at = now() WHERE tenant = w.tenant AND id = w.run_id;
        PERFORM pg_notify('stepgate_slot_free', w.run_id::text);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_end_wakes_awaiters AFTER UPDATE OF status ON stepgate.run FOR EACH ROW
    WHEN (new.awaited AND new.status IN ('completed', 'failed', 'cancelled') AND old.status IS DISTINCT FROM new.status)
    EXECUTE FUNCTION stepgate.wake_awaiters();

GRANT ALL ON FUNCTION stepgate.run_end_output(id uuid, status text, output jsonb, error jsonb) TO stepgate_app;
GRANT ALL ON FUNCTION stepgate.run_end_output(id uuid, status text, output jsonb, error jsonb) TO stepgate_system;
