-- The runs that are due: queued, or suspended with a wake time, by when they became due.
-- The stranded-run sweep walks it from the oldest, so it reads a bounded slice however
-- many runs there are; a run that has no job stays at the old end until it is found.
-- Runs started with ?wait are created running and finish without entering it.
CREATE INDEX run_due ON stepgate.run ((coalesce(wake_at, created_at)))
    WHERE status = 'queued' OR (status = 'suspended' AND wake_at IS NOT NULL);
