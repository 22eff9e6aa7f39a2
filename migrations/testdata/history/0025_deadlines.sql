-- A run may have a deadline: past it, the run fails with error type deadline_exceeded,
-- whatever it is doing (queued, scheduled, running or suspended). A River job scheduled at
-- the deadline, inserted with the run, makes that transition (invoker/deadline.go); the
-- column is what the job checks and what the API shows. A child run inherits its
-- parent's deadline. A function's config may set run_timeout, from which every run of
-- the revision gets a deadline at creation (the earlier of it and the run's own).
ALTER TABLE stepgate.run ADD COLUMN deadline timestamptz;
ALTER TABLE stepgate.function_revision ADD COLUMN run_timeout_ms bigint;

-- A run scheduled to start later (a delayed start) is due at its wake time, like a
-- queued run after a retry's backoff.
DROP INDEX stepgate.run_due;
CREATE INDEX run_due ON stepgate.run ((coalesce(wake_at, created_at)))
    WHERE status IN ('queued', 'scheduled') OR (status = 'suspended' AND wake_at IS NOT NULL);
