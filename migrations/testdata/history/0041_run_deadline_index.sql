-- The maintenance passes arm each gateway's timers for the deadlines of the runs that
-- have not ended and whose deadline is near (journal.UpcomingDeadlines), as they do for
-- wake times (run_due), so that a deadline fails its run on time rather than when River's
-- scheduler promotes its job. Only such runs are indexed: a run without a deadline, or
-- one that has ended, costs the index nothing.
CREATE INDEX run_deadline ON stepgate.run (deadline)
    WHERE deadline IS NOT NULL AND status IN ('scheduled', 'queued', 'running', 'suspended');
