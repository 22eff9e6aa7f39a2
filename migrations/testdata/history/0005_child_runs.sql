-- Child runs: a run started by another run's invoke await records where its parent
-- waits for it (the parent's seq and the entry's name), so that the statement that makes
-- the child terminal also journals its outcome in the parent and makes the parent due.
--
-- Row-level security needs nothing new: the policies of 0004 filter rows, not columns,
-- and the grants on stepgate.run are table-wide. A child has its parent's tenant.
ALTER TABLE stepgate.run
    ADD COLUMN parent_seq  integer,
    ADD COLUMN parent_name text,
    ADD CONSTRAINT run_parent_entry
        CHECK (parent_seq IS NULL OR (parent_id IS NOT NULL AND parent_seq > 0 AND parent_name IS NOT NULL));

-- One child per entry of its parent: a stale invocation that answers the same invoke
-- again cannot start a second child. Also finds a run's children.
CREATE UNIQUE INDEX run_child ON stepgate.run (parent_id, parent_seq) WHERE parent_id IS NOT NULL;
