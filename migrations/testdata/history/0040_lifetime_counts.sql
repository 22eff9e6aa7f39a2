-- Counts that mean what users read (issue 23, item 3). The run's counters in a row stay
-- as they are, for the limits that read them: failed_invocations (the function's retry
-- policy) and recoveries (STEPGATE_MAX_RECOVERIES), each reset when the run makes
-- progress. Their lifetime totals are new columns, never reset: what the API, the CLI
-- and the dashboard show as a run's failed invocations and recoveries.
ALTER TABLE stepgate.run
    ADD COLUMN lifetime_failed_invocations integer NOT NULL DEFAULT 0 CHECK (lifetime_failed_invocations >= 0),
    ADD COLUMN lifetime_recoveries         integer NOT NULL DEFAULT 0 CHECK (lifetime_recoveries >= 0);

COMMENT ON COLUMN stepgate.run.attempts IS
    'Invocations of the run: claims that call its function, the current one included (the protocol''s run.attempt). A claim that fails the run before calling is not counted.';
COMMENT ON COLUMN stepgate.run.failed_invocations IS
    'Failed invocations in a row, for the function''s retry policy; reset by any outcome but a retried failure.';
COMMENT ON COLUMN stepgate.run.recoveries IS
    'Recoveries in a row since the journal last grew, for STEPGATE_MAX_RECOVERIES; reset by any outcome of an invocation.';
COMMENT ON COLUMN stepgate.run.lifetime_failed_invocations IS
    'Failed invocations of the run in its lifetime: no answer, an answer other than HTTP 200, or an answer or checkpoint the gateway cannot apply. Never reset.';
COMMENT ON COLUMN stepgate.run.lifetime_recoveries IS
    'Recoveries of the run in its lifetime: invocations whose gateway died, stopped or lost the database, requeued. Never reset.';

-- Backfill, from what the rows can tell. Every failed invocation that was retried left
-- an attempt_failure row at seq 0; one that ended the run left none, but its error says
-- so when it exhausted the retry policy ("...; giving up)") or was a bad answer. (A run
-- failed at once by a bound or a nondeterministic checkpoint cannot be told from one
-- failed by its function's answer: those are not counted.) A run's recoveries before
-- its latest outcome were reset: the current in-a-row count is all that is known, a
-- lower bound.
--
-- Finished runs are backfilled too: run_terminal_is_final refuses any update of them,
-- so it is off for this statement only, under this transaction's exclusive lock on the
-- table (ADD COLUMN's), which no other writer can slip past; their status, outcome and
-- times are untouched. The statement runs as stepgate_system, whose policy sees every
-- row (FORCE ROW LEVEL SECURITY hides them all from the tables' owner).
ALTER TABLE stepgate.run DISABLE TRIGGER run_terminal_is_final;
SET LOCAL ROLE stepgate_system;
UPDATE stepgate.run r SET
    lifetime_failed_invocations = (SELECT count(*) FROM stepgate.attempt_failure f WHERE f.run_id = r.id AND f.seq = 0)
        + CASE WHEN r.status = 'failed' AND (r.error->>'type' = 'bad_answer' OR r.error->>'message' LIKE '%; giving up)')
            THEN 1 ELSE 0 END,
    lifetime_recoveries = r.recoveries
WHERE r.recoveries > 0 OR r.status = 'failed'
    OR EXISTS (SELECT 1 FROM stepgate.attempt_failure f WHERE f.run_id = r.id AND f.seq = 0);
RESET ROLE;
ALTER TABLE stepgate.run ENABLE TRIGGER run_terminal_is_final;

-- Run events carry the counts by their API names: invocations (the attempts column),
-- and the lifetime failed invocations and recoveries.
CREATE OR REPLACE FUNCTION stepgate.notify_run_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stepgate.run_watch w WHERE w.tenant = NEW.tenant AND w.expires_at > now()) THEN
        PERFORM pg_notify('stepgate_run_events', json_build_object('id', NEW.id, 'tenant', NEW.tenant,
            'function', NEW.function, 'status', NEW.status, 'invocations', NEW.attempts,
            'failed_invocations', NEW.lifetime_failed_invocations, 'recoveries', NEW.lifetime_recoveries,
            'wake_at', nullif(NEW.wake_at, 'infinity'), 'finished_at', NEW.finished_at)::text);
    END IF;
    RETURN NULL;
END
$$;
