-- Concurrency limits at the speed of an unlimited function (issue 12's speed targets).
-- Migration 0029 counts a key's running runs in one row, which every claim and every
-- release of the key locks until its commit: a function-wide limit that is never
-- reached puts all of the function's starts and ends in one line, one WAL flush after
-- another. And a run of a limited function was created queued, then claimed by a second
-- statement; a counter at 0 was deleted at each release and inserted again at the next
-- claim. This migration:
--
-- * Stripes a key with a large limit: a key of limit L >= 64 counts its running runs in
--   S = least(64, L / 16) rows (stripe 0..S-1), stripe i allowed stripe_cap(L, i) of
--   them (L / S, one more for the first L mod S stripes): the caps add up to exactly L,
--   and the rows' sum is the key's running runs. A run records in slot_stripes the
--   stripe it took of each key. A key of limit < 64 has one row, stripe 0, claimed and
--   released exactly as in 0029.
--
--   A claim of a striped key whose line is empty takes a slot from any stripe with room
--   that no other transaction holds (FOR UPDATE SKIP LOCKED), without waiting: claims
--   and releases of the key then run side by side. Otherwise (a line, or no free stripe
--   with room) it takes the key's hold lock (a transaction-level advisory lock,
--   exclusive), reads the stripes' sum and the older runs in the line, and takes a slot
--   from a free stripe with room (SKIP LOCKED again: it never waits for a stripe), or
--   holds the run. A claim prefers the emptiest stripes, and a release gives its slot
--   back to the stripe its run took, waiting for it only while a claim of that stripe
--   commits.
--
--   Why a held run is always woken: a release of a striped key takes the key's hold
--   lock shared (releases do not wait for each other) after giving back its slot, then
--   looks at the key's line. A hold that commits first is seen by that look (a
--   statement after the lock). A release that took the lock first makes the hold wait
--   until it commits, and the hold then reads the room it gave back. A hold that found
--   room only in stripes that others held is seen by those others' releases, or is
--   taken by their claims (then their runs' releases see it).
--
-- * Creates a run claimed when its slots have room: take_slots is the counting part of
--   claim_slots, for a run that may not exist yet, and CreateRun calls it in its INSERT
--   (not for a start with an idempotency key, whose INSERT may do nothing). A start
--   that finds no room is created queued, as before, and claimed or held by claim_slots.
--
-- * Keeps counters at 0: the minute's prune (journal.PruneFlow) deletes a key's rows
--   when none counts a run and none waits in its line, skipping rows in use.
--
-- Order of locks: counter rows (and hold locks) in key order, then run rows. Within a
-- key, only a one-row key's claim, and a release (for the stripe its run took), wait for
-- a counter row, holding no other counter row of that key; claims of a striped key wait
-- only for its hold lock.
--
-- A lowered limit of a striped key holds for the runs started after it at once, and in
-- all once the runs started under the old one have ended (their stripes may count more
-- than the new caps until then).

ALTER TABLE stepgate.concurrency_slot ADD COLUMN stripe smallint NOT NULL DEFAULT 0;
ALTER TABLE stepgate.concurrency_slot DROP CONSTRAINT concurrency_slot_pkey,
    ADD PRIMARY KEY (tenant, function, key, stripe);

-- The stripe of each key (slot_keys order) that a running run holds a slot of; NULL
-- (or a NULL element) means stripe 0.
ALTER TABLE stepgate.run ADD COLUMN slot_stripes smallint[];

-- slot_keys and slot_limits (0029) in PL/pgSQL, whose plans are kept per session: as
-- SQL functions that cannot be inlined, they were planned again at every run's INSERT.
CREATE OR REPLACE FUNCTION stepgate.slot_keys(config jsonb, input jsonb, identity jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN (SELECT CASE WHEN count(*) > 0 THEN array_agg(
        CASE WHEN c.v->>'key' IS NULL THEN '' ELSE (c.v->>'key') || '=' || (
            SELECT CASE WHEN octet_length(x) > 200 THEN 'md5:' || md5(x) ELSE x END
            FROM (SELECT coalesce(jsonb_build_object('input', input, 'identity', identity)
                #>> string_to_array(c.v->>'key', '.'), '') AS x) val)
        END ORDER BY c.ord) END
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(config->'concurrency') = 'array'
        THEN config->'concurrency' ELSE '[]' END) WITH ORDINALITY AS c(v, ord));
END
$$;

CREATE OR REPLACE FUNCTION stepgate.slot_limits(config jsonb) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN (SELECT CASE WHEN count(*) > 0 THEN array_agg((c.v->>'limit')::integer ORDER BY c.ord) END
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(config->'concurrency') = 'array'
        THEN config->'concurrency' ELSE '[]' END) WITH ORDINALITY AS c(v, ord));
END
$$;

-- slot_stripes is how many rows count the running runs of a key of limit lim.
CREATE FUNCTION stepgate.slot_stripes(lim integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN lim >= 64 THEN least(64, lim / 16) ELSE 1 END
$$;

-- stripe_cap is how many running runs stripe may count for a key of limit lim: the caps
-- of a key's stripes add up to lim; a stripe that lim no longer has may count none.
CREATE FUNCTION stepgate.stripe_cap(lim integer, stripe integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN stripe >= stepgate.slot_stripes(lim) THEN 0
        ELSE lim / stepgate.slot_stripes(lim) + (stripe < lim % stepgate.slot_stripes(lim))::integer END
$$;

-- slot_hold_lock is the advisory lock id of a key's hold lock.
CREATE FUNCTION stepgate.slot_hold_lock(p_tenant text, p_function text, p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended(p_tenant || E'\x1f' || p_function || E'\x1f' || p_key, 37)
$$;

-- take_slots takes a slot of each key for a run of tenant's function created at
-- p_created_at with id p_id (which may not be inserted yet), in key order. It returns
-- blocked NULL and the stripe of each key taken, or else blocked, the (1-based) index
-- of the first key without room, having given back the slots it took. A key has room
-- when its running runs and the runs older than this one waiting in its line are fewer
-- than its limit (so runs start in creation order per key; a striped key's fast path
-- checks only that its line is empty). The rows it took stay locked until the caller's
-- transaction ends.
-- slot_line_ahead counts, up to lim, the runs waiting in key's line that are older than
-- the run created at p_created_at with id p_id.
CREATE FUNCTION stepgate.slot_line_ahead(p_tenant text, p_function text, p_key text,
    p_created_at timestamptz, p_id uuid, lim integer) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM (
        SELECT 1 FROM stepgate.run q
        WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = p_key
          AND q.status IN ('queued', 'scheduled', 'suspended')
          AND (q.created_at, q.id) < (p_created_at, p_id)
        LIMIT lim) older);
END
$$;

CREATE TYPE stepgate.slots_taken AS (blocked integer, stripes smallint[]);

CREATE FUNCTION stepgate.take_slots(p_tenant text, p_function text, p_keys text[], p_limits integer[],
    p_created_at timestamptz, p_id uuid) RETURNS stepgate.slots_taken
LANGUAGE plpgsql AS $$
DECLARE
    blocked integer;
    stripes smallint[];
    i integer;
    j integer;
    k text;
    v_lim integer;
    n integer;
    got integer;
    v_running integer;
    v_ahead integer;
    off integer := floor(random() * 64)::integer;
BEGIN
    IF p_keys IS NULL THEN
        RETURN (NULL, NULL)::stepgate.slots_taken;
    END IF;
    stripes := array_fill(NULL::smallint, ARRAY[cardinality(p_keys)]);
    FOR i IN SELECT u.ord FROM unnest(p_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
        k := p_keys[i];
        v_lim := p_limits[i];
        n := stepgate.slot_stripes(v_lim);
        got := NULL;
        IF n = 1 THEN
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
            -- The fast path: when no older run waits in the key's line, a stripe with
            -- room that nobody holds, an empty one by preference (a stripe that counts
            -- no run has no release coming to wait for this claim's commit). First two
            -- stripes at random, each one index lookup, then all of them, the emptiest
            -- first.
            IF stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, 1) = 0 THEN
                FOR j IN 0..1 LOOP
                    UPDATE stepgate.concurrency_slot s SET running = s.running + 1, lim = v_lim
                    WHERE (s.tenant, s.function, s.key, s.stripe) = (
                        SELECT c.tenant, c.function, c.key, c.stripe FROM stepgate.concurrency_slot c
                        WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                          AND c.stripe = (off + 31 * j) % n AND c.running = 0
                        FOR UPDATE SKIP LOCKED)
                    RETURNING s.stripe INTO got;
                    EXIT WHEN got IS NOT NULL;
                END LOOP;
                IF got IS NULL THEN
                    UPDATE stepgate.concurrency_slot s SET running = s.running + 1, lim = v_lim
                    WHERE (s.tenant, s.function, s.key, s.stripe) = (
                        SELECT c.tenant, c.function, c.key, c.stripe FROM stepgate.concurrency_slot c
                        WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                          AND c.running < stepgate.stripe_cap(v_lim, c.stripe)
                        ORDER BY c.running, (c.stripe + off) % 64 LIMIT 1
                        FOR UPDATE SKIP LOCKED)
                    RETURNING s.stripe INTO got;
                END IF;
            END IF;
            IF got IS NULL THEN
                -- The hold path, one claim of the key at a time, ordered with releases.
                PERFORM pg_advisory_xact_lock(stepgate.slot_hold_lock(p_tenant, p_function, k));
                -- The stripes missing (new, or pruned at 0). Only the missing: an upsert's
                -- conflict check would wait for the rows' updates in flight, whose
                -- releases may wait for this hold lock.
                INSERT INTO stepgate.concurrency_slot (tenant, function, key, stripe, running, lim)
                SELECT p_tenant, p_function, k, g, 0, v_lim FROM generate_series(0, n - 1) g
                WHERE NOT EXISTS (
                    SELECT 1 FROM stepgate.concurrency_slot c
                    WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k AND c.stripe = g)
                ON CONFLICT DO NOTHING;
                SELECT sum(c.running) INTO v_running FROM stepgate.concurrency_slot c
                WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k;
                v_ahead := stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, v_lim);
                IF coalesce(v_running, 0) + v_ahead < v_lim THEN
                    SELECT c.stripe INTO got FROM stepgate.concurrency_slot c
                    WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                      AND c.running < stepgate.stripe_cap(v_lim, c.stripe)
                    ORDER BY c.stripe LIMIT 1
                    FOR UPDATE SKIP LOCKED;
                    IF got IS NOT NULL THEN
                        UPDATE stepgate.concurrency_slot SET running = running + 1, lim = v_lim
                        WHERE tenant = p_tenant AND function = p_function AND key = k AND stripe = got;
                    END IF;
                END IF;
            END IF;
        END IF;
        IF got IS NULL THEN
            -- Give back what was taken: the rows are locked by this transaction, so
            -- nobody saw them change.
            FOR j IN SELECT generate_subscripts(stripes, 1) LOOP
                IF stripes[j] IS NOT NULL THEN
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

-- give_slot gives back a running run's slot of key, to p_stripe, the stripe it took
-- (waiting for it when a claim holds it). Only to that one: a release locks exactly one
-- row of a key, so releases never wait on each other in a cycle.
CREATE FUNCTION stepgate.give_slot(p_tenant text, p_function text, p_key text, p_stripe smallint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE stepgate.concurrency_slot SET running = running - 1
    WHERE tenant = p_tenant AND function = p_function AND key = p_key AND stripe = coalesce(p_stripe, 0)
      AND running > 0;
END
$$;

-- refill_slot wakes the runs waiting in key's line that its free slots can take (see
-- 0029). p_released: the caller has just given back a slot of the key; an empty line,
-- the common case, then costs one index probe. A one-row key's refill locks its row
-- (the caller of a release holds it already); a striped key's takes the key's hold lock
-- shared, and reads the stripes' sum without locks: concurrent refills may then wake one
-- run too many (it is held again, passing the slot on) or too few (the next release of
-- the key, or the minute's backstop, refill_held_lines, wakes it).
CREATE FUNCTION stepgate.refill_slot(p_tenant text, p_function text, p_key text, p_released boolean,
    p_lim integer DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_running integer;
    v_lim integer := p_lim;
    v_woken integer;
    v_stripes integer;
    q record;
BEGIN
    IF v_lim IS NULL THEN
        SELECT max(lim) INTO v_lim FROM stepgate.concurrency_slot
        WHERE tenant = p_tenant AND function = p_function AND key = p_key;
    END IF;
    v_stripes := stepgate.slot_stripes(coalesce(v_lim, 1));
    IF v_stripes > 1 THEN
        PERFORM pg_advisory_xact_lock_shared(stepgate.slot_hold_lock(p_tenant, p_function, p_key));
    END IF;
    IF p_released AND NOT EXISTS (
        SELECT 1 FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended')) THEN
        RETURN;
    END IF;
    IF v_stripes = 1 THEN
        -- The row lock orders refills of one key with its claims and releases.
        SELECT running, lim INTO v_running, v_lim FROM stepgate.concurrency_slot
        WHERE tenant = p_tenant AND function = p_function AND key = p_key AND stripe = 0
        FOR UPDATE;
        SELECT count(*) INTO v_woken FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity';
    ELSE
        -- The sum and the runs woken already, from one snapshot: a concurrent refill's
        -- freed slot and its wakes are seen together or not at all (then the runs it
        -- wakes are locked by it, and skipped below).
        SELECT (SELECT sum(running) FROM stepgate.concurrency_slot
                WHERE tenant = p_tenant AND function = p_function AND key = p_key),
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

-- 0029's signature; nothing calls it now.
DROP FUNCTION stepgate.refill_slot(text, text, text);

-- claim_slots (0029), with take_slots counting; it now returns the stripes taken too.
DROP FUNCTION stepgate.claim_slots(uuid);
CREATE FUNCTION stepgate.claim_slots(p_run uuid, OUT held text, OUT stripes smallint[])
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
    FROM stepgate.take_slots(r.tenant, r.function, r.slot_keys, r.slot_limits, r.created_at, r.id) t;
    -- The run's lock; it may have been claimed meanwhile.
    PERFORM 1 FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()))
    FOR UPDATE;
    due := FOUND;
    IF NOT due AND stripes IS NOT NULL THEN
        -- Give back what was taken: the rows are locked by this transaction, so nobody
        -- saw them change.
        FOR j IN SELECT generate_subscripts(stripes, 1) LOOP
            PERFORM stepgate.give_slot(r.tenant, r.function, r.slot_keys[j], stripes[j]);
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

-- release_slots (0029): each slot given back to the stripe it was taken from; counters
-- kept at 0.
CREATE OR REPLACE FUNCTION stepgate.release_slots() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
BEGIN
    IF OLD.status = 'running' THEN
        FOR i IN SELECT u.ord FROM unnest(NEW.slot_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
            -- A line with nobody in it, the common case, costs the refill one index probe.
            PERFORM stepgate.give_slot(NEW.tenant, NEW.function, NEW.slot_keys[i], OLD.slot_stripes[i]);
            PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, NEW.slot_keys[i], true, NEW.slot_limits[i]);
        END LOOP;
    ELSE
        PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, OLD.held_on, false);
    END IF;
    RETURN NULL;
END
$$;

-- refill_held_lines is the backstop of striped keys' refills: it refills up to p_limit
-- keys whose line has a run not woken yet, and returns how many it looked at.
CREATE FUNCTION stepgate.refill_held_lines(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    n integer := 0;
BEGIN
    FOR l IN
        SELECT DISTINCT tenant, function, held_on FROM stepgate.run
        WHERE held_on IS NOT NULL AND status IN ('queued', 'scheduled', 'suspended') AND wake_at = 'infinity'
        ORDER BY 1, 2, 3
        LIMIT p_limit
    LOOP
        PERFORM stepgate.refill_slot(l.tenant, l.function, l.held_on, false);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
