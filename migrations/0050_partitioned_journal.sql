-- journal_entry and attempt_failure are partitioned by month of their run's id (a UUIDv7,
-- whose first 48 bits are its creation's unix milliseconds), so that retention drops a
-- month of journal at once instead of deleting its rows (docs/schema.md#partitions).
-- run itself is not partitioned: Postgres keeps a unique index of a partitioned table
-- only if it holds the partition key, and run's idempotency key and child key are unique
-- across all of its ids.

-- The smallest run id of the month that begins at month (UTC, no time zone): the 48-bit
-- millisecond prefix of that instant, then zeros. A month's partition holds the ids from
-- its floor to the next month's.
CREATE FUNCTION stepgate.run_id_floor(month timestamp without time zone) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT (lpad(to_hex((extract(epoch FROM date_trunc('month', month)) * 1000)::bigint), 12, '0')
        || '00000000000000000000')::uuid
$$;

-- The partitions of the months of at (UTC) and the ahead months after it, of
-- journal_entry and attempt_failure, where missing; rows of those months that the
-- DEFAULT partition caught meanwhile move into them. It returns how many it created.
-- When one is missing, it locks both tables first, in one order, and waits at most
-- lock_wait for that (then fails: a later call retries): the journal's writers queue
-- behind a lock that waits, so it must not wait long, and less than deadlock_timeout, so
-- that a writer is never the one a deadlock aborts.
CREATE FUNCTION stepgate.create_journal_partitions(at timestamp with time zone, ahead integer, lock_wait interval DEFAULT '100ms')
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    first timestamp := date_trunc('month', at AT TIME ZONE 'UTC');
    month timestamp;
    lo uuid;
    hi uuid;
    t text;
    part text;
    moved bigint;
    made integer := 0;
BEGIN
    FOR i IN 0..ahead LOOP
        month := first + make_interval(months => i);
        lo := stepgate.run_id_floor(month);
        hi := stepgate.run_id_floor(month + interval '1 month');
        FOREACH t IN ARRAY ARRAY['journal_entry', 'attempt_failure'] LOOP
            part := t || '_p' || to_char(month, 'YYYYMM');
            CONTINUE WHEN to_regclass('stepgate.' || quote_ident(part)) IS NOT NULL;
            IF made = 0 THEN
                PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
                LOCK TABLE stepgate.journal_entry, stepgate.attempt_failure IN ACCESS EXCLUSIVE MODE;
            END IF;
            -- The DEFAULT partition may not keep rows of the new one's range.
            EXECUTE format('CREATE TEMPORARY TABLE partition_move (LIKE stepgate.%I) ON COMMIT DROP', t);
            EXECUTE format('WITH d AS (DELETE FROM stepgate.%I WHERE run_id >= %L AND run_id < %L RETURNING *)
                INSERT INTO partition_move SELECT * FROM d', t || '_default', lo, hi);
            GET DIAGNOSTICS moved = ROW_COUNT;
            EXECUTE format('CREATE TABLE stepgate.%I PARTITION OF stepgate.%I FOR VALUES FROM (%L) TO (%L)', part, t, lo, hi);
            IF moved > 0 THEN
                EXECUTE format('INSERT INTO stepgate.%I SELECT * FROM partition_move', t);
            END IF;
            DROP TABLE partition_move;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;

-- Drops the oldest month partitions of journal_entry and attempt_failure whose runs all
-- finished and are past their retention (their revision's retention_ms, else
-- default_ms) as of now(), of a month that is over, and returns that month ('YYYYMM'),
-- or NULL when no month is done. The month's runs stay, to be deleted by rows
-- (RetentionDeleteExpiredRuns), whose cascade then finds no journal to delete: the
-- triggers of run's deletes fire as they did. One month per call, each call its own
-- transaction: the lock on the journal is held for one drop only. A month whose locks it
-- cannot take within lock_wait (less than deadlock_timeout, as create_journal_partitions')
-- is left to a later call (NULL).
--
-- What it checks before its locks, it checks again under them by index alone: a run of
-- the month not finished (run_unfinished), or finished within the last minute (the
-- shortest retention), which only a run made since with an id of that month, by a clock
-- far behind, would be.
CREATE FUNCTION stepgate.drop_expired_journal_month(default_ms bigint, lock_wait interval DEFAULT '100ms')
    RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    p record;
    month timestamp;
    lo uuid;
    hi uuid;
    current uuid := stepgate.run_id_floor(date_trunc('month', now() AT TIME ZONE 'UTC'));
BEGIN
    FOR p IN
        SELECT substring(c.relname FROM 16) AS ym FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'stepgate.journal_entry'::regclass AND c.relname ~ '^journal_entry_p[0-9]{6}$'
        ORDER BY 1
    LOOP
        month := to_date(p.ym || '01', 'YYYYMMDD');
        lo := stepgate.run_id_floor(month);
        hi := stepgate.run_id_floor(month + interval '1 month');
        EXIT WHEN hi > current;
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM stepgate.run r
            WHERE r.id >= lo AND r.id < hi
              AND NOT coalesce(r.finished_at < now() - (
                  SELECT coalesce(f.retention_ms, default_ms) FROM stepgate.function_revision f
                  WHERE f.tenant = r.tenant AND f.name = r.function AND f.revision = r.revision) * interval '1 millisecond', false));
        BEGIN
            PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
            LOCK TABLE stepgate.journal_entry, stepgate.attempt_failure IN ACCESS EXCLUSIVE MODE;
        EXCEPTION WHEN lock_not_available THEN
            RETURN NULL;
        END;
        IF to_regclass('stepgate.journal_entry_p' || p.ym) IS NULL THEN
            RETURN NULL; -- a concurrent call dropped it
        END IF;
        IF EXISTS (SELECT 1 FROM stepgate.run r WHERE r.finished_at IS NULL AND r.id >= lo AND r.id < hi)
            OR EXISTS (SELECT 1 FROM stepgate.run r
                       WHERE r.finished_at > clock_timestamp() - interval '1 minute' AND r.id >= lo AND r.id < hi) THEN
            RETURN NULL;
        END IF;
        EXECUTE format('DROP TABLE IF EXISTS stepgate.%I, stepgate.%I', 'journal_entry_p' || p.ym, 'attempt_failure_p' || p.ym);
        RETURN p.ym;
    END LOOP;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION stepgate.create_journal_partitions(timestamp with time zone, integer, interval) FROM PUBLIC;
GRANT ALL ON FUNCTION stepgate.create_journal_partitions(timestamp with time zone, integer, interval) TO stepgate_system;
REVOKE ALL ON FUNCTION stepgate.drop_expired_journal_month(bigint, interval) FROM PUBLIC;
GRANT ALL ON FUNCTION stepgate.drop_expired_journal_month(bigint, interval) TO stepgate_system;

-- The runs not finished, by id: what drop_expired_journal_month checks under its locks.
CREATE INDEX run_unfinished ON stepgate.run USING btree (id) WHERE (finished_at IS NULL);

-- The tables are made anew, partitioned, under their names; the rows move over.
ALTER TABLE stepgate.journal_entry RENAME TO journal_entry_unpartitioned;
ALTER TABLE stepgate.attempt_failure RENAME TO attempt_failure_unpartitioned;

CREATE TABLE stepgate.journal_entry (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    output jsonb,
    error jsonb,
    attempt integer DEFAULT 1 NOT NULL,
    wake_at timestamp with time zone,
    invocation integer NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone DEFAULT now() NOT NULL,
    journal_bytes bigint,
    copied_from uuid,
    tenant text NOT NULL,
    CONSTRAINT journal_entry_seq_check CHECK ((seq > 0))
) PARTITION BY RANGE (run_id);

CREATE TABLE stepgate.attempt_failure (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    attempt integer NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    error jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant text NOT NULL,
    CONSTRAINT attempt_failure_seq_check CHECK ((seq >= 0))
) PARTITION BY RANGE (run_id);

-- Ids of no month's partition (another clock's, a test's made-up ones) land here.
CREATE TABLE stepgate.journal_entry_default PARTITION OF stepgate.journal_entry DEFAULT;
CREATE TABLE stepgate.attempt_failure_default PARTITION OF stepgate.attempt_failure DEFAULT;

-- The months of the existing runs' UUIDv7 ids (version digit 7, a time from 2020 on and
-- before 2100) get their partitions; the others' rows go to DEFAULT. No month is made
-- from the clock here, so a new database's schema is the same any day: the maintenance
-- makes the current month's and the next ones (maintenance.Partitions).
SELECT stepgate.create_journal_partitions(m, 0)
FROM (
    SELECT DISTINCT date_trunc('month', to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint / 1000.0), 'UTC') AS m
    FROM stepgate.run WHERE substr(id::text, 15, 1) = '7'
) ms
WHERE m >= '2020-01-01' AND m < '2100-01-01';

INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, error, attempt, wake_at, invocation,
    started_at, finished_at, journal_bytes, copied_from, tenant)
SELECT run_id, seq, kind, name, output, error, attempt, wake_at, invocation,
    started_at, finished_at, journal_bytes, copied_from, tenant
FROM stepgate.journal_entry_unpartitioned;
INSERT INTO stepgate.attempt_failure (run_id, seq, attempt, name, error, created_at, tenant)
SELECT run_id, seq, attempt, name, error, created_at, tenant FROM stepgate.attempt_failure_unpartitioned;

DROP TABLE stepgate.journal_entry_unpartitioned;
DROP TABLE stepgate.attempt_failure_unpartitioned;

-- Keys, indexes, the guard, row security and grants, as they were (0049).
ALTER TABLE stepgate.journal_entry ADD CONSTRAINT journal_entry_pkey PRIMARY KEY (tenant, run_id, seq),
    ADD CONSTRAINT journal_entry_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
ALTER TABLE stepgate.attempt_failure ADD CONSTRAINT attempt_failure_pkey PRIMARY KEY (tenant, run_id, seq, attempt),
    ADD CONSTRAINT attempt_failure_run_fkey FOREIGN KEY (tenant, run_id) REFERENCES stepgate.run(tenant, id) ON DELETE CASCADE;
CREATE INDEX journal_entry_value ON stepgate.journal_entry USING btree (tenant, run_id, name, seq DESC) WHERE (kind = 'value'::text);

CREATE TRIGGER journal_entry_is_immutable BEFORE UPDATE ON stepgate.journal_entry FOR EACH ROW EXECUTE FUNCTION stepgate.refuse_journal_update();

ALTER TABLE stepgate.journal_entry ENABLE ROW LEVEL SECURITY;
ALTER TABLE stepgate.journal_entry FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.attempt_failure ENABLE ROW LEVEL SECURITY;
ALTER TABLE stepgate.attempt_failure FORCE ROW LEVEL SECURITY;
CREATE POLICY system_access ON stepgate.journal_entry TO stepgate_system USING (true);
CREATE POLICY tenant_isolation ON stepgate.journal_entry TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));
CREATE POLICY system_access ON stepgate.attempt_failure TO stepgate_system USING (true);
CREATE POLICY tenant_isolation ON stepgate.attempt_failure TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT, INSERT ON TABLE stepgate.journal_entry TO stepgate_app, stepgate_system;
GRANT UPDATE (journal_bytes) ON TABLE stepgate.journal_entry TO stepgate_app, stepgate_system;
GRANT SELECT, INSERT ON TABLE stepgate.attempt_failure TO stepgate_app, stepgate_system;
