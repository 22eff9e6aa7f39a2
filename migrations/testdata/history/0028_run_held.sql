-- held says why a queued or scheduled run has not started yet, for people: flow control
-- (a concurrency limit, a throttle, a debounce, the tenant's fair share) sets it when it
-- holds a run back, and a claim clears it. NULL when nothing holds the run back.
ALTER TABLE stepgate.run ADD COLUMN held text;
