-- A run's priority, 1 (first) to 4 (last), as River's job priorities: the start's
-- ?priority=, else its function's config.priority, else 2, so that a start may put a run
-- ahead of the ordinary ones as well as behind them. Every invoke job of the run (its
-- start, its wake-ups after sleeps, retries, children, events, recoveries) carries it, so
-- River fetches the run's invocations in priority order across functions and tenants.
-- Adding a column with a constant default rewrites nothing.
ALTER TABLE stepgate.run
    ADD COLUMN priority smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4);

-- The invoker gives an invoke job its run's tenant (args "tenant", which the worker's
-- fair share reads without a query) and priority where it has the run at hand: a start,
-- a sleep's or a retry's wake-up, a child's start. The other jobs of a run (a parent's
-- wake-up, a resumed waiter, a recovery, a callback, a message) name only the run: this
-- trigger fills both in from the run's row in the job's own insert, one primary key probe,
-- so no caller can forget them. A job that names no run it can see is left as it is.
CREATE FUNCTION stepgate.invoke_job_of_run() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT tenant, priority INTO r FROM stepgate.run WHERE id = (NEW.args->>'run_id')::uuid;
    IF FOUND THEN
        NEW.priority := r.priority;
        NEW.args := NEW.args || jsonb_build_object('tenant', r.tenant);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER invoke_job_of_run BEFORE INSERT ON river_job
    FOR EACH ROW
    WHEN (NEW.kind = 'stepgate.invoke' AND NOT NEW.args ? 'tenant')
    EXECUTE FUNCTION stepgate.invoke_job_of_run();
