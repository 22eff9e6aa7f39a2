-- Crash recovery. An invocation's lease is short and renewed by its gateway while the
-- invocation is in flight (heartbeat leases); a lease that lapses means the gateway died
-- or lost the database, and the run is requeued as a *recovery*, which is not one of
-- the function's failed attempts. recoveries counts the recoveries since the journal
-- last grew: recovered_seq is the journal's last seq at the latest recovery, so a
-- recovery after new entries counts from 1 again. Past a cap the run fails
-- max_recoveries, so a run that kills every gateway that invokes it still ends.
ALTER TABLE stepgate.run
    ADD COLUMN recoveries    integer NOT NULL DEFAULT 0 CHECK (recoveries >= 0),
    ADD COLUMN recovered_seq integer NOT NULL DEFAULT 0 CHECK (recovered_seq >= 0);

-- The lease reaper and the stranded-run sweep were River periodic jobs run by River's
-- leader; every gateway now does both in its own maintenance pass, without waiting for a
-- leader. Their pending jobs would find no worker.
DELETE FROM river_job WHERE kind IN ('stepgate.reap', 'stepgate.sweep') AND state <> 'running';

-- Every gateway's maintenance pass looks up, for each run due for a while, the invoke
-- jobs that name it (journal.StrandedRuns). The GIN index on args matches every job's
-- "run_id" key, so each lookup read thousands of rows under a backlog: this one reads one.
CREATE INDEX river_job_stepgate_run ON river_job ((args->>'run_id')) WHERE kind = 'stepgate.invoke';
