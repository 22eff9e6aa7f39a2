-- Parallel steps and parallel children.
--
-- Steps run in parallel (step.Go) are checkpointed as they finish, so a run's journal may
-- hold holes below its last entry, within the window a checkpoint declares (see
-- journal.AppendEntry). journal_bytes stays what it was: the bytes of the run's entries
-- at or below the entry's seq. An entry's running total starts from the nearest entry
-- below it (not only seq - 1), and an entry written into a hole adds its bytes to the
-- entries above it (AppendEntry and this trigger do).
CREATE OR REPLACE FUNCTION stepgate.journal_bytes_before(run uuid, seq integer) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT p.journal_bytes FROM stepgate.journal_entry p
                     WHERE p.run_id = run AND p.seq < journal_bytes_before.seq
                     ORDER BY p.seq DESC LIMIT 1), 0)
$$;

-- A child run's end wakes its parent (it replaces migration 0019's function; the
-- trigger stays). While the parent still waits (suspended with no wake time), the
-- child's outcome is journaled at its parent_seq; the parent is made due when that was
-- what it waited for: at once for an invoke, and for an invoke_all (several children
-- at seq .. seq + count - 1) once every one of them is journaled. The parent's row is
-- locked first, so the ends of two children of one invoke_all are serialized, and the
-- count, a later statement, sees the other's committed entry: the last one wakes it.
CREATE OR REPLACE FUNCTION stepgate.wake_parent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p record;
    size bigint;
    output jsonb := CASE WHEN NEW.status = 'completed' THEN coalesce(NEW.output, 'null') END;
    error jsonb := CASE WHEN NEW.status <> 'completed' THEN NEW.error END;
BEGIN
    SELECT r.id, r.invocation, r.awaiting INTO p FROM stepgate.run r
    WHERE r.id = NEW.parent_id AND r.tenant = NEW.tenant
      AND r.status = 'suspended' AND r.wake_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    size := octet_length(coalesce(output, error)::text);
    INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, error, invocation, started_at, journal_bytes)
    VALUES (p.id, NEW.parent_seq, 'invoke', NEW.parent_name, output, error, p.invocation, NEW.created_at,
            stepgate.journal_bytes_before(p.id, NEW.parent_seq) + size)
    ON CONFLICT (run_id, seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A sibling that ended first sits above this entry: its total gains this one's bytes.
    UPDATE stepgate.journal_entry SET journal_bytes = journal_bytes + size
    WHERE run_id = p.id AND seq > NEW.parent_seq;
    IF p.awaiting->>'kind' = 'invoke_all' AND (
        SELECT count(*) FROM stepgate.journal_entry j
        WHERE j.run_id = p.id AND j.seq >= (p.awaiting->>'seq')::int
          AND j.seq < (p.awaiting->>'seq')::int + (p.awaiting->>'count')::int
    ) < (p.awaiting->>'count')::int THEN
        RETURN NULL;
    END IF;
    UPDATE stepgate.run SET wake_at = now() WHERE id = p.id;
    RETURN NULL;
END
$$;

-- Entries stay immutable but for that running total.
GRANT UPDATE (journal_bytes) ON stepgate.journal_entry TO stepgate_app, stepgate_system;

-- Journal entries stay immutable (the first write wins), but for journal_bytes, the
-- running total that a hole filled below an entry grows.
CREATE OR REPLACE FUNCTION stepgate.refuse_journal_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.journal_bytes IS DISTINCT FROM OLD.journal_bytes
       AND (to_jsonb(NEW) - 'journal_bytes') = (to_jsonb(OLD) - 'journal_bytes') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'journal entry (%, %) is immutable', OLD.run_id, OLD.seq
        USING ERRCODE = 'check_violation';
END $$;
