-- Messages between runs and from clients (DBOS send/recv): each run has a mailbox, a
-- row per message sent to it, taken by the run's receive awaits oldest first, per topic.
--
-- Sender and receiver serialize on the target run's row lock, so no message is lost and
-- each is consumed once:
--   * a send locks the run's row (SELECT ... FOR UPDATE), checks its status, and when
--     the run is suspended on a receive of the message's topic (its run_wait row, kind
--     'receive', with that topic), stores the message consumed at the wait's seq,
--     journals it there, deletes the wait and makes the run due; otherwise it stores the
--     message unconsumed;
--   * a receive await is stored by Finish, whose fenced update holds the run's row lock:
--     it takes the oldest unconsumed message of its topic, if any (journaled at once, the
--     run due now), or stores its wait row.
-- A wait that times out is journaled {"timed_out": true} by the claim (migration 0020).
CREATE TABLE stepgate.message (
    -- n orders a run's mailbox: a message's row is inserted under the run's row lock, so
    -- n follows the order in which sends took that lock.
    n             bigint      GENERATED ALWAYS AS IDENTITY,
    tenant        text        NOT NULL,
    run_id        uuid        NOT NULL REFERENCES stepgate.run (id) ON DELETE CASCADE,
    -- id deduplicates the messages of one run: the first message with an id wins.
    id            text        NOT NULL,
    topic         text        NOT NULL,
    data          jsonb       NOT NULL,
    identity      jsonb       NOT NULL, -- the sender's
    source_run_id uuid,                 -- the run that sent it (step.Send), if any
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- consumed_seq is the seq of the receive entry that took the message; NULL while
    -- it waits in the mailbox.
    consumed_seq  integer,
    PRIMARY KEY (run_id, id)
);
-- The oldest unconsumed message of a topic, and the count of a run's unconsumed ones.
CREATE INDEX message_unconsumed ON stepgate.message (run_id, topic, n) WHERE consumed_seq IS NULL;

-- A receive's wait names its topic.
ALTER TABLE stepgate.run_wait ADD COLUMN topic text,
    ADD CONSTRAINT run_wait_receive CHECK (kind <> 'receive' OR topic IS NOT NULL);

-- Tenant isolation, as migration 0004 sets it up for every table.
GRANT SELECT, INSERT, UPDATE ON stepgate.message TO stepgate_app, stepgate_system;
GRANT USAGE, SELECT ON SEQUENCE stepgate.message_n_seq TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.message ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.message TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.message TO stepgate_system USING (true);
