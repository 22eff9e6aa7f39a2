-- name: HoldBack :exec
-- Lowers the running job's priority to priority (a larger number) and says why in its
-- queued or scheduled run's held.
WITH job AS (
    UPDATE river_job SET priority = @priority WHERE river_job.id = @job_id AND state = 'running' AND priority < @priority
)
UPDATE stepgate.run SET held = @why
WHERE run.id = @run_id AND status IN ('queued', 'scheduled') AND held IS DISTINCT FROM @why;
