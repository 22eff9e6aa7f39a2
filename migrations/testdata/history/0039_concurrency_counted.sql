-- Concurrency limits of 64 or more counted, not kept in counter rows (issue 12's speed
-- target: a function-wide limit that is never reached costs a start no more than 10%).
-- A run of such a key held a slot in one of the key's stripe rows (0037), so each start
-- and each end updated a counter row: two statements, with their line probes, in a run
-- that otherwise makes two. Now a key of limit L >= 64 has no counter: its running runs
-- are the runs that are running and hold its slot (every running run with slot keys
-- holds a slot of each, 0029), read from a partial index of running limited runs. A key
-- of limit < 64 keeps its one counter row, as in 0029.
--
-- Tickets. A claim of a counted key that counts the key's running runs cannot see the
-- claims in flight beside it. So each key has T = least(32, L / 2) tickets, transaction
-- advisory locks (slot_ticket_lock): a fast claim takes one with pg_try_advisory_xact_lock
-- (never waiting), then counts; at most T fast claims of the key are in flight at once, so
-- when the count is below L - T, the key's running runs stay below L whatever those in
-- flight decide. Let X be the claim committed with the latest count: every claim it did
-- not see was in flight when it counted (it counted later than they did), holding a
-- ticket, so at most T - 1 others. The claim writes nothing but its run row.
--
-- Near the limit (a count of L - T or more), or with older runs waiting in the key's
-- line, a claim is exact: it takes the key's hold lock exclusive, then all T tickets in
-- order (waiting for the fast claims in flight to commit, and keeping new ones out), and
-- counts the running runs and the older runs in the line, up to L: room when they are
-- fewer than L, else the run is held, as in 0029. Only claim_slots (a claim in its own
-- transaction) is exact; a run being created (take_slots' p_create, CreateRun's INSERT)
-- never waits: without room at once it is created queued, and claim_slots claims it.
--
-- No deadlock: a transaction holding a ticket of a key never waits for a lock of that
-- key. A fast claim only tries tickets; an exact claim waits for the hold lock holding
-- nothing of the key, then for tickets, which only fast claims (never waiting) hold, as
-- exact claims are one at a time under the hold lock. A claim_slots fast claim that, once
-- it holds its ticket, counts L - T or more may only try the hold lock; when another
-- exact claim has it, the claim is abandoned with SQLSTATE SGRTY (its transaction rolled
-- back, the ticket let go) and journal.ClaimRunSlots tries again. Across keys, locks are
-- taken in key order, as before.
--
-- Why a held run is always woken: a release takes the key's hold lock shared, then looks
-- at the key's line (0037): an exact claim that holds a run and a release are ordered by
-- the hold lock; a fast claim never holds a run.
--
-- Cost per start of a counted key, far from the limit: one ticket (an in-memory lock) and
-- one statement (the count, stopping at L - T, and the line's probe); at its end, the hold
-- lock shared and the line's probe. No row of a counter is written.
--
-- Counter rows of the keys that are counted now are deleted: nothing reads them.

CREATE INDEX run_slot_running ON stepgate.run (tenant, function)
    WHERE status = 'running' AND slot_keys IS NOT NULL;

DELETE FROM stepgate.concurrency_slot WHERE lim >= 64 OR stripe > 0;

-- slot_tickets is how many tickets a key of limit lim has: 0 for a key with a counter row.
CREATE FUNCTION stepgate.slot_tickets(lim integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN lim >= 64 THEN least(32, lim / 2) ELSE 0 END
$$;

-- slot_ticket_lock is the advisory lock id of ticket p_ticket of a key.
CREATE FUNCTION stepgate.slot_ticket_lock(p_tenant text, p_function text, p_key text, p_ticket integer) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended(p_tenant || E'\x1f' || p_function || E'\x1f' || p_key, 4096 + p_ticket)
$$;

-- slot_running counts, up to lim, the running runs that hold a slot of key.
CREATE FUNCTION stepgate.slot_running(p_tenant text, p_function text, p_key text, lim integer) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM (
        SELECT 1 FROM stepgate.run r
        WHERE r.tenant = p_tenant AND r.function = p_function AND r.status = 'running'
          AND r.slot_keys IS NOT NULL AND p_key = ANY (r.slot_keys)
        LIMIT lim) c);
END
$$;

-- slot_fast_count is what a fast claim of key reads: its running runs, counted up to
-- lim, and whether a run older than the one created at p_created_at with id p_id waits in
-- its line. One statement (a SQL function, inlined where take_slots calls it).
CREATE FUNCTION stepgate.slot_fast_count(p_tenant text, p_function text, p_key text, lim integer,
    p_created_at timestamptz, p_id uuid) RETURNS TABLE (running integer, line boolean)
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*)::integer FROM (
            SELECT 1 FROM stepgate.run r
            WHERE r.tenant = p_tenant AND r.function = p_function AND r.status = 'running'
              AND r.slot_keys IS NOT NULL AND p_key = ANY (r.slot_keys)
            LIMIT lim) c),
        EXISTS (SELECT 1 FROM stepgate.run q
            WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = p_key
              AND q.status IN ('queued', 'scheduled', 'suspended')
              AND (q.created_at, q.id) < (p_created_at, p_id))
$$;

-- take_slots (0038) with counted keys. p_create: the run is being created (CreateRun's
-- INSERT): a counted key is taken only by a fast claim, never waiting.
CREATE FUNCTION stepgate.take_slots(p_tenant text, p_function text, p_keys text[], p_limits integer[],
    p_created_at timestamptz, p_id uuid, p_create boolean) RETURNS stepgate.slots_taken
LANGUAGE plpgsql AS $$
DECLARE
    stripes smallint[];
    i integer;
    j integer;
    k text;
    v_lim integer;
    n integer;
    got integer;
    v_running integer;
    v_ahead integer;
    v_line boolean;
    ticket boolean;
    off integer := floor(random() * 32)::integer;
BEGIN
    IF p_keys IS NULL THEN
        RETURN (NULL, NULL)::stepgate.slots_taken;
    END IF;
    stripes := array_fill(NULL::smallint, ARRAY[cardinality(p_keys)]);
    FOREACH i IN ARRAY CASE WHEN cardinality(p_keys) = 1 THEN '{1}'::integer[] ELSE stepgate.slot_order(p_keys) END LOOP
        k := p_keys[i];
        v_lim := p_limits[i];
        n := stepgate.slot_tickets(v_lim);
        got := NULL;
        IF n = 0 THEN
            -- One row, as in 0029: taken by an upsert that re-checks the count on the
            -- row's newest version and locks it (a concurrent claim of the key waits
            -- for this one's commit, then sees its increment); then the older runs in
            -- the key's line, read under that lock, may give it back.
            INSERT INTO stepgate.concurrency_slot AS s (tenant, function, key, stripe, running, lim)
            VALUES (p_tenant, p_function, k, 0, 1, v_lim)
            ON CONFLICT (tenant, function, key, stripe) DO UPDATE
                SET running = s.running + 1, lim = excluded.lim
                WHERE s.running < excluded.lim
            RETURNING s.running INTO v_running;
            IF FOUND THEN
                got := 0;
                v_ahead := stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, v_lim);
                IF v_running + v_ahead > v_lim THEN
                    PERFORM stepgate.give_slot(p_tenant, p_function, k, 0::smallint);
                    got := NULL;
                END IF;
            END IF;
        ELSE
            ticket := false;
            v_line := false;
            v_running := 0;
            IF NOT p_create THEN
                -- Far from the limit, by a count without a ticket (a claim that would then
                -- count too many holding one could not wait).
                SELECT f.running, f.line INTO v_running, v_line
                FROM stepgate.slot_fast_count(p_tenant, p_function, k, v_lim - n, p_created_at, p_id) f;
            END IF;
            IF NOT v_line AND v_running < v_lim - n THEN
                -- The fast claim: a ticket, then the count under it.
                FOR j IN 0 .. n - 1 LOOP
                    IF pg_try_advisory_xact_lock(stepgate.slot_ticket_lock(p_tenant, p_function, k, (off + j) % n)) THEN
                        ticket := true;
                        EXIT;
                    END IF;
                END LOOP;
                IF ticket THEN
                    SELECT f.running, f.line INTO v_running, v_line
                    FROM stepgate.slot_fast_count(p_tenant, p_function, k, v_lim - n, p_created_at, p_id) f;
                    IF NOT v_line AND v_running < v_lim - n THEN
                        got := 0;
                    END IF;
                END IF;
            END IF;
            IF got IS NULL AND NOT p_create THEN
                -- The exact claim, one at a time under the hold lock, with every ticket.
                IF ticket THEN
                    IF NOT pg_try_advisory_xact_lock(stepgate.slot_hold_lock(p_tenant, p_function, k)) THEN
                        RAISE EXCEPTION 'concurrency key % of % is being claimed exactly; claim again', k, p_function
                            USING ERRCODE = 'SGRTY';
                    END IF;
                ELSE
                    PERFORM pg_advisory_xact_lock(stepgate.slot_hold_lock(p_tenant, p_function, k));
                END IF;
                FOR j IN 0 .. n - 1 LOOP
                    PERFORM pg_advisory_xact_lock(stepgate.slot_ticket_lock(p_tenant, p_function, k, j));
                END LOOP;
                v_running := stepgate.slot_running(p_tenant, p_function, k, v_lim);
                v_ahead := stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, v_lim);
                IF v_running + v_ahead < v_lim THEN
                    got := 0;
                END IF;
            END IF;
        END IF;
        IF got IS NULL THEN
            -- Give back the counter rows taken: they are locked by this transaction, so
            -- nobody saw them change. A counted key has nothing to give back.
            FOR j IN 1 .. cardinality(stripes) LOOP
                IF stripes[j] IS NOT NULL AND stepgate.slot_tickets(p_limits[j]) = 0 THEN
                    PERFORM stepgate.give_slot(p_tenant, p_function, p_keys[j], stripes[j]);
                END IF;
            END LOOP;
            RETURN (i, NULL)::stepgate.slots_taken;
        END IF;
        stripes[i] := got;
    END LOOP;
    RETURN (NULL, stripes)::stepgate.slots_taken;
END
$$;

-- take_slots' 0037 signature, for a gateway of an older build: as when creating a run.
CREATE OR REPLACE FUNCTION stepgate.take_slots(p_tenant text, p_function text, p_keys text[], p_limits integer[],
    p_created_at timestamptz, p_id uuid) RETURNS stepgate.slots_taken
LANGUAGE sql AS $$
    SELECT stepgate.take_slots(p_tenant, p_function, p_keys, p_limits, p_created_at, p_id, true)
$$;

-- refill_slot (0037) with counted keys: the running runs are counted under the hold
-- lock shared; the key's limit, when the caller does not know it, is its counter row's
-- or else the line's first run's.
CREATE OR REPLACE FUNCTION stepgate.refill_slot(p_tenant text, p_function text, p_key text, p_released boolean,
    p_lim integer DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_running integer;
    v_lim integer := p_lim;
    v_woken integer;
    v_counted boolean;
    q record;
BEGIN
    IF v_lim IS NULL THEN
        SELECT max(lim) INTO v_lim FROM stepgate.concurrency_slot
        WHERE tenant = p_tenant AND function = p_function AND key = p_key;
    END IF;
    IF v_lim IS NULL THEN
        SELECT l.slot_limits[array_position(l.slot_keys, p_key)] INTO v_lim FROM stepgate.run l
        WHERE l.tenant = p_tenant AND l.function = p_function AND l.held_on = p_key
          AND l.status IN ('queued', 'scheduled', 'suspended')
        ORDER BY l.created_at, l.id LIMIT 1;
    END IF;
    v_counted := stepgate.slot_tickets(coalesce(v_lim, 1)) > 0;
    IF v_counted THEN
        PERFORM pg_advisory_xact_lock_shared(stepgate.slot_hold_lock(p_tenant, p_function, p_key));
    END IF;
    IF p_released AND NOT EXISTS (
        SELECT 1 FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended')) THEN
        RETURN;
    END IF;
    IF NOT v_counted THEN
        -- The row lock orders refills of one key with its claims and releases.
        SELECT running, lim INTO v_running, v_lim FROM stepgate.concurrency_slot
        WHERE tenant = p_tenant AND function = p_function AND key = p_key AND stripe = 0
        FOR UPDATE;
        SELECT count(*) INTO v_woken FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity';
    ELSE
        -- The running runs and the runs woken already, from one snapshot: a concurrent
        -- refill's freed slot and its wakes are seen together or not at all (then the
        -- runs it wakes are locked by it, and skipped below).
        SELECT stepgate.slot_running(p_tenant, p_function, p_key, v_lim),
            (SELECT count(*) FROM stepgate.run
                WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
                  AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity')
        INTO v_running, v_woken;
    END IF;
    v_running := coalesce(v_running, 0);
    FOR q IN
        SELECT id, slot_keys, slot_limits FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at = 'infinity'
        ORDER BY created_at, id
        FOR UPDATE
    LOOP
        EXIT WHEN v_running + v_woken >= coalesce(q.slot_limits[array_position(q.slot_keys, p_key)], v_lim, 1);
        UPDATE stepgate.run SET wake_at = now() WHERE id = q.id;
        PERFORM pg_notify('stepgate_slot_free', q.id::text);
        v_woken := v_woken + 1;
    END LOOP;
END
$$;

-- claim_slots (0037), claiming exactly: take_slots without p_create.
CREATE OR REPLACE FUNCTION stepgate.claim_slots(p_run uuid, OUT held text, OUT stripes smallint[])
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    k text;
    j integer;
    blocked integer;
    due boolean;
BEGIN
    SELECT id, tenant, function, created_at, slot_keys, slot_limits INTO r FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()));
    IF NOT FOUND THEN
        held := '';
        RETURN;
    END IF;
    SELECT t.blocked, t.stripes INTO blocked, stripes
    FROM stepgate.take_slots(r.tenant, r.function, r.slot_keys, r.slot_limits, r.created_at, r.id, false) t;
    -- The run's lock; it may have been claimed meanwhile.
    PERFORM 1 FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()))
    FOR UPDATE;
    due := FOUND;
    IF NOT due AND stripes IS NOT NULL THEN
        -- Give back the counter rows taken: they are locked by this transaction, so
        -- nobody saw them change.
        FOR j IN 1 .. cardinality(stripes) LOOP
            IF stepgate.slot_tickets(r.slot_limits[j]) = 0 THEN
                PERFORM stepgate.give_slot(r.tenant, r.function, r.slot_keys[j], stripes[j]);
            END IF;
        END LOOP;
    END IF;
    IF NOT due THEN
        held := '';
        stripes := NULL;
        RETURN;
    END IF;
    IF blocked IS NULL THEN
        RETURN;
    END IF;
    held := stepgate.held_reason(r.slot_keys[blocked], r.slot_limits[blocked]);
    UPDATE stepgate.run SET held = claim_slots.held, held_on = r.slot_keys[blocked], wake_at = 'infinity',
        status = CASE WHEN status = 'scheduled' THEN 'queued' ELSE status END
    WHERE id = p_run;
    -- Pass on what this run leaves: a slot it was woken for.
    FOR k IN SELECT unnest(r.slot_keys) ORDER BY 1 LOOP
        PERFORM stepgate.refill_slot(r.tenant, r.function, k, false);
    END LOOP;
END
$$;

-- release_slots (0038) with counted keys: nothing to give back, the hold lock shared
-- before the line is read.
CREATE OR REPLACE FUNCTION stepgate.release_slots() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    k text;
    v_locked text;
BEGIN
    IF OLD.status <> 'running' THEN
        PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, OLD.held_on, false);
        RETURN NULL;
    END IF;
    FOREACH i IN ARRAY CASE WHEN cardinality(NEW.slot_keys) = 1 THEN '{1}'::integer[] ELSE stepgate.slot_order(NEW.slot_keys) END LOOP
        k := NEW.slot_keys[i];
        IF stepgate.slot_tickets(coalesce(NEW.slot_limits[i], 1)) > 0 THEN
            v_locked := pg_advisory_xact_lock_shared(stepgate.slot_hold_lock(NEW.tenant, NEW.function, k))::text;
        ELSE
            UPDATE stepgate.concurrency_slot s SET running = s.running - 1
            WHERE s.tenant = NEW.tenant AND s.function = NEW.function AND s.key = k
              AND s.stripe = 0 AND s.running > 0;
        END IF;
        IF EXISTS (
            SELECT 1 FROM stepgate.run
            WHERE tenant = NEW.tenant AND function = NEW.function AND held_on = k
              AND status IN ('queued', 'scheduled', 'suspended')) THEN
            PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, k, false, NEW.slot_limits[i]);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
