-- A child run's end wakes its parent, whoever ends it (an answer, a cancellation, a
-- limit): in the statement that makes the child terminal, this trigger journals the
-- child's outcome in the parent at the child's parent_seq (kind invoke: its output when
-- it completed, else its error; started when the child was created) and makes the
-- parent due now, but only while the parent still waits for it (suspended with no wake
-- time). The parent's row lock is taken before its entry is written and its status
-- checked again after any concurrent change (a cancellation), so nothing is journaled in
-- a parent that stopped waiting, and (run, seq) being unique, nothing twice. It replaces
-- a CTE that each statement ending a run had to splice in.
CREATE FUNCTION stepgate.wake_parent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH woken AS (
        UPDATE stepgate.run p SET wake_at = now()
        WHERE p.id = NEW.parent_id AND p.tenant = NEW.tenant
          AND p.status = 'suspended' AND p.wake_at IS NULL
        RETURNING p.id, p.invocation
    ), outcome AS (
        SELECT CASE WHEN NEW.status = 'completed' THEN coalesce(NEW.output, 'null') END AS output,
               CASE WHEN NEW.status <> 'completed' THEN NEW.error END AS error
    )
    INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, error, invocation, started_at, journal_bytes)
    SELECT woken.id, NEW.parent_seq, 'invoke', NEW.parent_name, outcome.output, outcome.error,
           woken.invocation, NEW.created_at,
           stepgate.journal_bytes_before(woken.id, NEW.parent_seq)
               + octet_length(coalesce(outcome.output, outcome.error)::text)
    FROM woken, outcome
    ON CONFLICT (run_id, seq) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER child_end_wakes_parent AFTER UPDATE OF status ON stepgate.run
    FOR EACH ROW
    WHEN (NEW.parent_seq IS NOT NULL AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION stepgate.wake_parent();
