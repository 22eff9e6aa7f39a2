-- run, run_tombstone, operation, schedule and run_watch key by tenant first, as a run's rows
-- do since 0049 and 0050 (docs/schema.md#ready-to-shard-by-tenant), and a run's child is
-- unique within its tenant (run_child). Every primary key of a table with a tenant column
-- now leads with it (migrations' TestEveryTenantTableIsKeyedByTenant).
--
-- What finds a run, an operation or a schedule by its id alone (a claim by its job's run
-- id, a checkpoint by its token's, the finish, the lease renewals and release, a bulk
-- cancel's job by the operation's id, a schedule's tick by the schedule's) keeps a unique index on the
-- id alone, named *_id_lookup: it serves those statements, and it keeps an id unique over
-- every tenant, so that a lookup by id finds the one row of that id, never another
-- tenant's row of the same id. With callback_token_hash_lookup (a callback's URL has no
-- tenant), these are the only unique indexes without the tenant: a database sharded by
-- tenant could not hold them, and there the lookups would carry the tenant instead.
-- run's (tenant, id) primary key replaces its unique (tenant, id), so run has as many
-- indexes as before.

-- Taken in the order a run's writers take them (the run, then its rows), so that a
-- gateway still running meanwhile waits for this migration instead of deadlocking with it.
LOCK TABLE stepgate.run, stepgate.journal_entry, stepgate.attempt_failure, stepgate.callback,
    stepgate.message, stepgate.stream, stepgate.run_wait IN ACCESS EXCLUSIVE MODE;

-- The foreign keys to run are on its unique (tenant, id), which goes: they are dropped and
-- made again on the primary key, with the same columns.
ALTER TABLE stepgate.journal_entry DROP CONSTRAINT journal_entry_run_fkey;
ALTER TABLE stepgate.attempt_failure DROP CONSTRAINT attempt_failure_run_fkey;
ALTER TABLE stepgate.callback DROP CONSTRAINT callback_run_fkey;
ALTER TABLE stepgate.message DROP CONSTRAINT message_run_fkey;
ALTER TABLE stepgate.stream DROP CONSTRAINT stream_run_fkey;
ALTER TABLE stepgate.run_wait DROP CONSTRAINT run_wait_run_fkey;

ALTER TABLE stepgate.run DROP CONSTRAINT run_tenant_id_key,
    DROP CONSTRAINT run_pkey,
    ADD CONSTRAINT run_pkey PRIMARY KEY (tenant, id),
    ADD CONSTRAINT run_id_lookup UNIQUE (id);
DROP INDEX stepgate.run_child;
CREATE UNIQUE INDEX run_child ON stepgate.run USING btree (tenant, parent_id, parent_seq) WHERE (parent_id IS NOT NULL);

ALTER TABLE stepgate.journal_entry
    ADD CONSTRAINT journal_entry_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.attempt_failure
    ADD CONSTRAINT attempt_failure_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.callback
    ADD CONSTRAINT callback_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.message
    ADD CONSTRAINT message_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.stream
    ADD CONSTRAINT stream_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.run_wait
    ADD CONSTRAINT run_wait_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;

-- callback_token_hash_key, renamed for what it is (its index is kept as it is).
ALTER TABLE stepgate.callback RENAME CONSTRAINT callback_token_hash_key TO callback_token_hash_lookup;

-- Tombstones are read by (id, tenant) and inserted and deleted by retention, which names
-- both: no lookup by id alone. A run's id is unique (run_id_lookup), so is its tombstone's.
ALTER TABLE stepgate.run_tombstone DROP CONSTRAINT run_tombstone_pkey,
    ADD CONSTRAINT run_tombstone_pkey PRIMARY KEY (tenant, id);

-- A bulk cancel's job (CancelOperationArgs) holds only its operation's id.
ALTER TABLE stepgate.operation DROP CONSTRAINT operation_pkey,
    ADD CONSTRAINT operation_pkey PRIMARY KEY (tenant, id),
    ADD CONSTRAINT operation_id_lookup UNIQUE (id);

-- A tick (TickArgs, OverdueTicks) holds only its schedule's id.
ALTER TABLE stepgate.schedule DROP CONSTRAINT schedule_pkey,
    ADD CONSTRAINT schedule_pkey PRIMARY KEY (tenant, id),
    ADD CONSTRAINT schedule_id_lookup UNIQUE (id);

-- A gateway's watch of a tenant's runs: its statements name both (ON CONFLICT (gateway_id,
-- tenant) infers this key too).
ALTER TABLE stepgate.run_watch DROP CONSTRAINT run_watch_pkey,
    ADD CONSTRAINT run_watch_pkey PRIMARY KEY (tenant, gateway_id);
