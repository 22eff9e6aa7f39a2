-- callback, message, stream, stream_chunk and run_wait key by their run's tenant first, as
-- journal_entry and attempt_failure do since 0049 (docs/schema.md#ready-to-shard-by-tenant):
-- each already carries its run's tenant; a database sharded by tenant can hold a run's
-- rows beside the run, and a run's rows are found by the leading (tenant, run_id).
-- Their foreign keys to run are on (tenant, run_id), through run's unique (tenant, id).

-- run_wait had no foreign key: a wait lives only while its run is suspended on it, and is
-- deleted by whatever ends the wait. One whose run is gone (or of another tenant) can
-- resume nothing; it goes before the key that forbids it.
DELETE FROM stepgate.run_wait w
WHERE NOT EXISTS (SELECT 1 FROM stepgate.run r WHERE r.tenant = w.tenant AND r.id = w.run_id);

ALTER TABLE stepgate.stream_chunk DROP CONSTRAINT stream_chunk_run_id_key_fkey,
    DROP CONSTRAINT stream_chunk_pkey,
    DROP CONSTRAINT stream_chunk_run_id_key_at_seq_at_attempt_at_index_key;

ALTER TABLE stepgate.stream DROP CONSTRAINT stream_run_id_fkey,
    DROP CONSTRAINT stream_pkey,
    ADD CONSTRAINT stream_pkey PRIMARY KEY (tenant, run_id, key),
    ADD CONSTRAINT stream_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;

ALTER TABLE stepgate.stream_chunk ADD CONSTRAINT stream_chunk_pkey PRIMARY KEY (tenant, run_id, key, pos),
    ADD CONSTRAINT stream_chunk_place_key UNIQUE (tenant, run_id, key, at_seq, at_attempt, at_index),
    ADD CONSTRAINT stream_chunk_stream_fkey FOREIGN KEY (tenant, run_id, key) REFERENCES stepgate.stream(tenant, run_id, key) ON DELETE CASCADE;

ALTER TABLE stepgate.callback DROP CONSTRAINT callback_run_id_fkey,
    DROP CONSTRAINT callback_pkey,
    ADD CONSTRAINT callback_pkey PRIMARY KEY (tenant, run_id, seq),
    ADD CONSTRAINT callback_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
-- callback_token_hash_key stays: a callback's URL carries its token and no tenant, so a
-- resolution by token finds the callback by the token's hash alone, in every tenant.
-- (Sharded by tenant, this unique index would not be allowed without tenant; the lookup
-- would move to a table of token hashes to (tenant, run_id, seq), distributed by hash.)
DROP INDEX stepgate.callback_by_name;
CREATE INDEX callback_by_name ON stepgate.callback USING btree (tenant, run_id, name, seq);

ALTER TABLE stepgate.message DROP CONSTRAINT message_run_id_fkey,
    DROP CONSTRAINT message_pkey,
    ADD CONSTRAINT message_pkey PRIMARY KEY (tenant, run_id, id),
    ADD CONSTRAINT message_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
DROP INDEX stepgate.message_unconsumed;
CREATE INDEX message_unconsumed ON stepgate.message USING btree (tenant, run_id, topic, n) WHERE (consumed_seq IS NULL);

ALTER TABLE stepgate.run_wait DROP CONSTRAINT run_wait_pkey,
    ADD CONSTRAINT run_wait_pkey PRIMARY KEY (tenant, run_id, seq, alt),
    ADD CONSTRAINT run_wait_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
