-- Concurrency limits with fewer statements per run (issue 12's speed target for a
-- function-wide limit that is never reached). Same semantics as 0037; what changes is
-- how many queries PL/pgSQL runs for a run's claim and its release, each one a plan
-- lookup and an executor start inside Postgres:
--
-- * slot_keys and slot_limits walk the config's array with expressions only (no query);
--   a key's value is read from the input or the identity directly, without building a
--   {"input", "identity"} object that copies both.
-- * take_slots orders a single key without a query, and its striped fast path is one
--   statement: a random stripe that counts no run, taken only when the key's line ahead
--   of the run is empty. When that stripe is busy it goes on as in 0037.
-- * release_slots gives a slot back, takes the hold lock and looks at the line itself,
--   calling refill_slot only when the line has runs in it.

CREATE OR REPLACE FUNCTION stepgate.slot_keys(config jsonb, input jsonb, identity jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    limits jsonb := config->'concurrency';
    keys text[] := '{}';
    expr text;
    path text[];
    x text;
BEGIN
    IF jsonb_typeof(limits) IS DISTINCT FROM 'array' OR jsonb_array_length(limits) = 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 0 .. jsonb_array_length(limits) - 1 LOOP
        expr := limits->i->>'key';
        IF expr IS NULL THEN
            keys := keys || ''::text;
            CONTINUE;
        END IF;
        path := string_to_array(expr, '.');
        x := coalesce(CASE path[1]
            WHEN 'input' THEN input #>> path[2:]
            WHEN 'identity' THEN identity #>> path[2:] END, '');
        IF octet_length(x) > 200 THEN
            x := 'md5:' || md5(x);
        END IF;
        keys := keys || (expr || '=' || x);
    END LOOP;
    RETURN keys;
END
$$;

CREATE OR REPLACE FUNCTION stepgate.slot_limits(config jsonb) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    limits jsonb := config->'concurrency';
    lims integer[] := '{}';
BEGIN
    IF jsonb_typeof(limits) IS DISTINCT FROM 'array' OR jsonb_array_length(limits) = 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 0 .. jsonb_array_length(limits) - 1 LOOP
        lims := lims || (limits->i->>'limit')::integer;
    END LOOP;
    RETURN lims;
END
$$;

-- slot_order is the order in which a run's keys are claimed and released (by key, so
-- that two runs never wait for each other's counter rows in a cycle): the indexes of
-- keys, sorted by their keys.
CREATE FUNCTION stepgate.slot_order(keys text[]) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF cardinality(keys) = 1 THEN
        RETURN '{1}';
    END IF;
    RETURN ARRAY(SELECT u.ord FROM unnest(keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key);
END
$$;

-- take_slots (0037) with slot_order, and its striped fast path's first try in one
-- statement.
CREATE OR REPLACE FUNCTION stepgate.take_slots(p_tenant text, p_function text, p_keys text[], p_limits integer[],
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
    FOREACH i IN ARRAY stepgate.slot_order(p_keys) LOOP
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
            -- no run has no release coming to wait for this claim's commit). First a
            -- stripe at random with the line's check, in one statement; then another at
            -- random, each one index lookup; then all of them, the emptiest first.
            UPDATE stepgate.concurrency_slot s SET running = s.running + 1, lim = v_lim
            WHERE (s.tenant, s.function, s.key, s.stripe) = (
                SELECT c.tenant, c.function, c.key, c.stripe FROM stepgate.concurrency_slot c
                WHERE c.tenant = p_tenant AND c.function = p_function AND c.key = k
                  AND c.stripe = off % n AND c.running = 0
                FOR UPDATE SKIP LOCKED)
              AND NOT EXISTS (
                SELECT 1 FROM stepgate.run q
                WHERE q.tenant = p_tenant AND q.function = p_function AND q.held_on = k
                  AND q.status IN ('queued', 'scheduled', 'suspended')
                  AND (q.created_at, q.id) < (p_created_at, p_id))
            RETURNING s.stripe INTO got;
            IF got IS NULL AND stepgate.slot_line_ahead(p_tenant, p_function, k, p_created_at, p_id, 1) = 0 THEN
                FOR j IN 1..1 LOOP
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
            FOR j IN 1 .. cardinality(stripes) LOOP
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

-- release_slots (0037) with give_slot inlined and refill_slot called only when the
-- key's line has runs in it: for a striped key, the hold lock is taken shared with the
-- slot's give-back and before the line is read, as refill_slot does (0037's header says
-- why a held run is then always woken: a hold and a release of the key are ordered by
-- the lock, whichever takes it first).
CREATE OR REPLACE FUNCTION stepgate.release_slots() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    k text;
BEGIN
    IF OLD.status <> 'running' THEN
        PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, OLD.held_on, false);
        RETURN NULL;
    END IF;
    FOREACH i IN ARRAY stepgate.slot_order(NEW.slot_keys) LOOP
        k := NEW.slot_keys[i];
        -- The slot given back and, for a striped key, the hold lock taken shared, in one
        -- statement (the lock is taken before the line's statement below takes its
        -- snapshot).
        UPDATE stepgate.concurrency_slot s SET running = s.running - 1
        FROM (SELECT CASE WHEN stepgate.slot_stripes(coalesce(NEW.slot_limits[i], 1)) > 1
            THEN pg_advisory_xact_lock_shared(stepgate.slot_hold_lock(NEW.tenant, NEW.function, k)) END) l
        WHERE s.tenant = NEW.tenant AND s.function = NEW.function AND s.key = k
          AND s.stripe = coalesce(OLD.slot_stripes[i], 0) AND s.running > 0;
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
