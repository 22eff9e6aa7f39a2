-- Concurrency limits at the speed of an unlimited function (issue 12's speed targets).
-- Migration 0029 counts a key's running runs in one row, which every claim and every
-- release of the key locks until its commit: a function-wide limit that is never
-- reached still puts all of the function's starts and ends in one line, one WAL flush
-- after another. And a run of a limited function was created queued, then claimed by
-- a second statement; a counter at 0 was deleted at each release and inserted again at
-- the next claim. This migration:
--
-- * Stripes a key with a large limit: a key of limit L >= 64 counts its running runs in
--   S = least(16, L / 32) rows (stripe 0..S-1), stripe i allowed stripe_cap(L, i) of
--   them (L / S, one more for the first L mod S stripes), so that the caps add up to
--   exactly L and the sum of the rows is the key's running runs. A key of limit < 64 has
--   one row, stripe 0, and behaves exactly as in 0029.
--
--   A claim of a striped key whose line is empty takes a slot from any stripe with room
--   that no other transaction holds (FOR UPDATE SKIP LOCKED): it never waits, so claims
--   and releases of one key run side by side. Otherwise (a line, or every stripe with
--   room busy) it takes the exact path of 0029: it locks all the key's stripes in
--   stripe order, reads their sum, and takes a slot or holds the run. A release gives
--   back a slot to any stripe that has one (the rows partition one count; which stripe
--   a run took does not matter), preferring stripes that a lowered limit no longer
--   allows, without waiting when it can.
--
--   Why a held run is always woken: a hold locks every stripe of its key, and a
--   release locks the stripe it gives back to, so one of the two commits first. A
--   release that commits first is seen by the hold (it re-reads the stripes under
--   lock, finds the room and takes it instead); a hold that commits first is seen by
--   the release's refill (its line probe is a statement after its stripe lock). A
--   refill that is not a release (a woken run passing its slot on) reads a striped
--   key's sum without locks; a wake it misses is made by the next release of the key,
--   and by the minute's backstop (journal.PruneFlow calls refill_held_lines).
--
-- * Creates a run claimed when its slots have room: take_slots is the counting part of
--   claim_slots, for a run that may not exist yet, and CreateRun calls it in its INSERT
--   (not for a start with an idempotency key, whose INSERT may do nothing). A start
--   that finds no room is created queued, as before, and claimed or held by claim_slots.
--
-- * Keeps counters at 0: the minute's prune (journal.PruneFlow) deletes those with no
--   line, skipping rows in use.
--
-- Order of locks, as in 0029: counter rows in key order (and a key's stripes in stripe
-- order when it locks them all; the fast path and a release's first try never wait),
-- then run rows.

ALTER TABLE stepgate.concurrency_slot ADD COLUMN stripe smallint NOT NULL DEFAULT 0;
ALTER TABLE stepgate.concurrency_slot DROP CONSTRAINT concurrency_slot_pkey,
    ADD PRIMARY KEY (tenant, function, key, stripe);

-- slot_stripes is how many rows count the running runs of a key of limit lim.
CREATE FUNCTION stepgate.slot_stripes(lim integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN lim >= 64 THEN least(16, lim / 32) ELSE 1 END
$$;

-- stripe_cap is how many running runs stripe may count for a key of limit lim: the caps
-- of a key's stripes add up to lim; a stripe that lim no longer has may count none.
CREATE FUNCTION stepgate.stripe_cap(lim integer, stripe integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN stripe >= stepgate.slot_stripes(lim) THEN 0
        ELSE lim / stepgate.slot_stripes(lim) + (stripe < lim % stepgate.slot_stripes(lim))::integer END
$$;

-- give_slot gives back one running run's slot of key: to a stripe that counts one, one
-- that lim no longer allows first, one no other transaction holds if there is one.
CREATE FUNCTION stepgate.give_slot(p_tenant text, p_function text, p_key text, p_lim integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n integer := stepgate.slot_stripes(coalesce(p_lim, 1));
    off integer := floor(random() * 16)::integer;
BEGIN
    LOOP
        UPDATE stepgate.concurrency_slot s SET running = s.running - 1
        WHERE (s.tenant, s.function, s.key, s.stripe) IN (
            SELECT c.tenant, c.function, c.key, c.stripe FROM stepgate.concurrency_slot c
            WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = p_key AND c.running > 0
            ORDER BY c.stripe >= n DESC, (c.stripe + off) % 16 LIMIT 1
            FOR UPDATE SKIP LOCKED);
        EXIT WHEN FOUND;
        -- Every stripe that counts one is busy: wait for one (it is re-read after the
        -- wait, and may then count none: try again).
        UPDATE stepgate.concurrency_slot s SET running = s.running - 1
        WHERE (s.tenant, s.function, s.key, s.stripe) IN (
            SELECT c.tenant, c.function, c.key, c.stripe FROM stepgate.concurrency_slot c
            WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = p_key AND c.running > 0
            ORDER BY c.stripe LIMIT 1
            FOR UPDATE)
          AND s.running > 0;
        EXIT WHEN FOUND;
        EXIT WHEN NOT EXISTS (
            SELECT 1 FROM stepgate.concurrency_slot c
            WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = p_key AND c.running > 0);
    END LOOP;
END
$$;

-- take_slots takes a slot of each key for a run of tenant's function created at
-- p_created_at with id p_id (which may not be inserted yet), in key order, and returns
-- NULL when it took them all, or else the (1-based) index of the first key without room,
-- having given back the slots it took. A key has room when its running runs and the runs
-- older than this one waiting in its line are fewer than its limit (so runs start in
-- creation order per key; a striped key's fast path checks only that its line is
-- empty). The counter rows it took stay locked until the caller's transaction ends.
CREATE FUNCTION stepgate.take_slots(p_tenant text, p_function text, p_keys text[], p_limits integer[],
    p_created_at timestamptz, p_id uuid) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    k text;
    v_lim integer;
    n integer;
    got integer;
    v_running integer;
    v_ahead integer;
    taken text[] := '{}';
    off integer := floor(random() * 16)::integer;
BEGIN
    IF p_keys IS NULL THEN
        RETURN NULL;
    END IF;
    FOR i IN SELECT u.ord FROM unnest(p_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
        k := p_keys[i];
        v_lim := p_limits[i];
        n := stepgate.slot_stripes(v_lim);
        got := NULL;
        IF n > 1 AND NOT EXISTS (
            SELECT 1 FROM stepgate.run q
            WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = k
              AND q.status IN ('queued', 'scheduled', 'suspended')
              AND (q.created_at, q.id) < (p_created_at, p_id)) THEN
            -- The fast path: a stripe with room that nobody holds, without waiting.
            UPDATE stepgate.concurrency_slot s SET running = s.running + 1, lim = p_limits[i]
            WHERE (s.tenant, s.function, s.key, s.stripe) IN (
                SELECT c.tenant, c.function, c.key, c.stripe FROM stepgate.concurrency_slot c
                WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                  AND c.running < stepgate.stripe_cap(p_limits[i], c.stripe)
                ORDER BY (c.stripe + off) % 16 LIMIT 1
                FOR UPDATE SKIP LOCKED)
            RETURNING s.stripe INTO got;
        END IF;
        IF got IS NULL THEN
            -- The exact path: every stripe of the key locked, in stripe order (a
            -- concurrent claim of the key waits for this one's commit, then sees its
            -- increment), their sum against the limit with the older runs in the line.
            IF n > 1 THEN
                INSERT INTO stepgate.concurrency_slot (tenant, function, key, stripe, running, lim)
                SELECT p_tenant, p_function, k, g, 0, v_lim FROM generate_series(0, n - 1) g
                ON CONFLICT DO NOTHING;
            END IF;
            SELECT sum(l.running) INTO v_running FROM (
                SELECT c.running FROM stepgate.concurrency_slot c
                WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                ORDER BY c.stripe FOR UPDATE) l;
            SELECT count(*) INTO v_ahead FROM (
                SELECT 1 FROM stepgate.run q
                WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = k
                  AND q.status IN ('queued', 'scheduled', 'suspended')
                  AND (q.created_at, q.id) < (p_created_at, p_id)
                LIMIT v_lim) older;
            IF coalesce(v_running, 0) + v_ahead < v_lim THEN
                -- A stripe with room (the first; 0 when the key has no row yet, which
                -- inserts it), re-checked on its newest version.
                INSERT INTO stepgate.concurrency_slot AS s (tenant, function, key, stripe, running, lim)
                VALUES (p_tenant, p_function, k, coalesce((
                    SELECT c.stripe FROM stepgate.concurrency_slot c
                    WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                      AND c.running < stepgate.stripe_cap(v_lim, c.stripe)
                    ORDER BY c.stripe LIMIT 1), 0), 1, v_lim)
                ON CONFLICT (tenant, function, key, stripe) DO UPDATE
                    SET running = s.running + 1, lim = excluded.lim
                    WHERE s.running < stepgate.stripe_cap(excluded.lim, s.stripe)
                RETURNING s.stripe INTO got;
            END IF;
        END IF;
        IF got IS NULL THEN
            -- Give back what was taken: the rows are locked by this transaction, so
            -- nobody saw them change.
            FOR k IN SELECT unnest(taken) LOOP
                PERFORM stepgate.give_slot(p_tenant, p_function, k, p_limits[array_position(p_keys, k)]);
            END LOOP;
            RETURN i;
        END IF;
        taken := taken || k;
    END LOOP;
    RETURN NULL;
END
$$;

-- refill_slot wakes the runs waiting in key's line that its free slots can take (see
-- 0029). p_released: the caller has just given back a slot of the key (it holds that
-- stripe's lock, so a hold of the key cannot commit before it): an empty line, the
-- common case, then costs one index probe and no lock. A striped key is refilled from
-- its stripes' sum read without locks unless p_lock (the backstop, which holds no
-- counter row): concurrent refills may then wake one run too many (it is held again,
-- passing the slot on) or too few (the next release of the key, or the backstop,
-- wakes it).
CREATE FUNCTION stepgate.refill_slot(p_tenant text, p_function text, p_key text, p_released boolean, p_lock boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_running integer;
    v_lim integer;
    v_woken integer;
    v_stripes integer;
    q record;
BEGIN
    IF p_released AND NOT EXISTS (
        SELECT 1 FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended')) THEN
        RETURN;
    END IF;
    SELECT count(*), max(lim) INTO v_stripes, v_lim FROM stepgate.concurrency_slot
    WHERE tenant = p_tenant AND function = p_function AND key = p_key;
    IF v_stripes <= 1 OR p_lock THEN
        -- The row lock orders refills of one key with its claims and releases.
        SELECT sum(l.running), max(l.lim) INTO v_running, v_lim FROM (
            SELECT c.running, c.lim FROM stepgate.concurrency_slot c
            WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = p_key
            ORDER BY c.stripe FOR UPDATE) l;
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
    IF v_woken IS NULL THEN
        SELECT count(*) INTO v_woken FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity';
    END IF;
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

-- The 0029 signature: a refill that gave nothing back, under lock for a one-row key.
CREATE OR REPLACE FUNCTION stepgate.refill_slot(p_tenant text, p_function text, p_key text) RETURNS void
LANGUAGE sql AS $$
    SELECT stepgate.refill_slot(p_tenant, p_function, p_key, false, false)
$$;

-- claim_slots (0029), with take_slots counting.
CREATE OR REPLACE FUNCTION stepgate.claim_slots(p_run uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    k text;
    i integer;
    blocked integer;
    reason text;
    due boolean;
BEGIN
    SELECT id, tenant, function, created_at, slot_keys, slot_limits INTO r FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()));
    IF NOT FOUND THEN
        RETURN '';
    END IF;
    blocked := stepgate.take_slots(r.tenant, r.function, r.slot_keys, r.slot_limits, r.created_at, r.id);
    -- The run's lock; it may have been claimed meanwhile.
    PERFORM 1 FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()))
    FOR UPDATE;
    due := FOUND;
    IF NOT due AND blocked IS NULL AND r.slot_keys IS NOT NULL THEN
        -- Give back what was taken: the rows are locked by this transaction, so nobody
        -- saw them change.
        FOR i IN SELECT u.ord FROM unnest(r.slot_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
            PERFORM stepgate.give_slot(r.tenant, r.function, r.slot_keys[i], r.slot_limits[i]);
        END LOOP;
    END IF;
    IF NOT due THEN
        RETURN '';
    END IF;
    IF blocked IS NULL THEN
        RETURN NULL;
    END IF;
    reason := stepgate.held_reason(r.slot_keys[blocked], r.slot_limits[blocked]);
    UPDATE stepgate.run SET held = reason, held_on = r.slot_keys[blocked], wake_at = 'infinity',
        status = CASE WHEN status = 'scheduled' THEN 'queued' ELSE status END
    WHERE id = p_run;
    -- Pass on what this run leaves: a slot it was woken for.
    FOR k IN SELECT unnest(r.slot_keys) ORDER BY 1 LOOP
        PERFORM stepgate.refill_slot(r.tenant, r.function, k, false, false);
    END LOOP;
    RETURN reason;
END
$$;

-- release_slots (0029): slots given back to any stripe, counters kept at 0.
CREATE OR REPLACE FUNCTION stepgate.release_slots() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
BEGIN
    IF OLD.status = 'running' THEN
        FOR i IN SELECT u.ord FROM unnest(NEW.slot_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
            PERFORM stepgate.give_slot(NEW.tenant, NEW.function, NEW.slot_keys[i], NEW.slot_limits[i]);
        END LOOP;
        FOR i IN SELECT u.ord FROM unnest(NEW.slot_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
            PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, NEW.slot_keys[i], true, false);
        END LOOP;
    ELSE
        PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, OLD.held_on, false, false);
    END IF;
    RETURN NULL;
END
$$;

-- refill_held_lines is the backstop of striped keys' lock-free refills: it refills, under
-- lock, up to p_limit keys whose line has a run not woken yet, and returns how many it
-- looked at.
CREATE FUNCTION stepgate.refill_held_lines(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    n integer := 0;
BEGIN
    FOR l IN
        SELECT DISTINCT tenant, function, held_on FROM stepgate.run
        WHERE held_on IS NOT NULL AND status IN ('queued', 'scheduled', 'suspended') AND wake_at = 'infinity'
        LIMIT p_limit
    LOOP
        PERFORM stepgate.refill_slot(l.tenant, l.function, l.held_on, false, true);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
