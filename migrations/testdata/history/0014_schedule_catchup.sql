-- A schedule's catch-up policy. A tick handled at most catchup_window_ms after its time
-- is on time and always starts its run. Ticks handled later were missed: catchup says
-- what they start: 'skip' nothing, 'one' one run for the earliest of them, 'all' a run
-- each (the latest 100). The window's bounds, 1s to 24h, are the API's.
ALTER TABLE stepgate.schedule
    ADD COLUMN catchup text NOT NULL DEFAULT 'one' CHECK (catchup IN ('skip', 'one', 'all')),
    ADD COLUMN catchup_window_ms bigint NOT NULL DEFAULT 60000
        CHECK (catchup_window_ms BETWEEN 1000 AND 86400000);

-- Every gateway looks, about once a second, for the schedules whose next tick is past
-- (their timer's gateway is gone, and River's job waits for its leader).
CREATE INDEX schedule_next_at ON stepgate.schedule (next_at);
