-- Concurrency limits: a function's config may say `concurrency: [{"limit": 5},
-- {"limit": 1, "key": "input.customer_id"}]`, at most N runs of the function running at
-- once, in all or per value of a key taken from the run's input or identity.
--
-- The design, and why it is race-free under READ COMMITTED with any number of gateways:
--
-- * A run records at creation the slots it needs: slot_keys (one text per limit: '' for
--   the function-wide limit, 'input.customer_id=c-9' for a keyed one) and slot_limits.
--   stepgate.slot_keys computes them in the INSERT itself, from the revision's config,
--   so a function without `concurrency` costs no statement (its run gets NULLs).
--
-- * stepgate.concurrency_slot holds one counter row per (tenant, function, key) in use:
--   `running` is the number of the key's runs whose status is 'running'. It is exact
--   because it changes only in the transaction that changes such a run's status:
--     - up, by stepgate.claim_slots, which the claim of a limited run calls (journal.
--       ClaimRunSlots) before its UPDATE to 'running', in the same statement. For each
--       key, in key order, it locks the counter row (SELECT ... FOR UPDATE returns its
--       newest committed version: a concurrent claim of the key waits for the first's
--       commit, then sees its increment, the EvalPlanQual re-check) and then runs
--       INSERT ... ON CONFLICT DO UPDATE SET running = running + 1 WHERE running <
--       limit, atomic too (it inserts the row when there was none, or re-checks the
--       limit on the newest version when another claim inserted it meanwhile). When a
--       key is full the keys taken before it are given back in the same transaction
--       (the rows are locked by it, so nobody saw them taken) and the run is held.
--     - down, by the trigger release_slots, when a run leaves 'running' (its answer
--       ends or suspends it, it is cancelled, fails its deadline, or the lease reaper or
--       a hand-over requeues it): in the statement that changes the status, so a gateway
--       that dies holding slots gives them back when the reaper requeues its runs.
--   Counter rows are locked in key order by claims and releases alike, so two of them
--   never wait on each other in a cycle. A claim locks its run's row after its
--   counters; a release locks the ending run's row, then the counters, then (in
--   refill_slot) the rows of the waiting runs it wakes: a claim that waits for a
--   counter holds no run's row, so claims and releases never wait in a cycle either.
--   (Runs of revisions with different keys, or a woken run cancelled as it is claimed,
--   could; Postgres then aborts one, which is retried.) A counter at 0 with no run
--   waiting is deleted.
--
-- * A run that finds a key full (or finds older runs already waiting in that key's
--   line) is held: it keeps its status (queued; a due sleeper stays suspended; a due
--   delayed start becomes queued), gets held (the reason, for people) and held_on (the
--   key whose line it waits in), and wake_at = 'infinity', so that it is due for
--   nobody: no River job, timer or stranded-run sweep polls it (the API shows no
--   wake_at for it).
--
-- * stepgate.refill_slot(tenant, function, key) makes as many of the key's waiting runs
--   due (wake_at = now(), oldest first) as the key has free slots not promised already
--   to runs woken before, and notifies each on channel stepgate_slot_free: every
--   gateway LISTENs and claims the run at once (the invoker's wakeHeld); the
--   stranded-run sweep is the backstop when nobody heard. It is called when a slot
--   frees (release_slots), when a woken waiting run ends without running (cancelled,
--   deadline), and when a woken run is held again on another key (it passes on the
--   slot it was woken for).
--
-- Runs start in creation order per key: a run takes a key's slot only when the key's
-- running runs and the older runs waiting in its line leave room (see claim_slots), and
-- lines are woken oldest first.
ALTER TABLE stepgate.run
    ADD COLUMN slot_keys text[],
    ADD COLUMN slot_limits integer[],
    ADD COLUMN held_on text;

CREATE TABLE stepgate.concurrency_slot (
    tenant   text    NOT NULL,
    function text    NOT NULL,
    key      text    NOT NULL,
    running  integer NOT NULL CHECK (running >= 0),
    lim      integer NOT NULL, -- the limit of the key's last claim
    PRIMARY KEY (tenant, function, key)
);

-- A key's line: its waiting runs, oldest first.
CREATE INDEX run_slot_line ON stepgate.run (tenant, function, held_on, created_at, id)
    WHERE held_on IS NOT NULL AND status IN ('queued', 'scheduled', 'suspended');

-- Tenant isolation, as migration 0004 sets it up for every table.
GRANT SELECT, INSERT, UPDATE, DELETE ON stepgate.concurrency_slot TO stepgate_app, stepgate_system;
ALTER TABLE stepgate.concurrency_slot ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stepgate.concurrency_slot TO stepgate_app
    USING (tenant = nullif(current_setting('stepgate.tenant', true), ''));
CREATE POLICY system_access ON stepgate.concurrency_slot TO stepgate_system USING (true);

-- slot_keys returns a run's slot keys from its revision's config (validated at
-- registration: invoker.ParseConfig) and its input and identity, or NULL for none. A
-- key's value is read at its dotted path from {"input": ..., "identity": ...}; absent or
-- null is the empty value; a value longer than 200 bytes is replaced by its md5.
CREATE FUNCTION stepgate.slot_keys(config jsonb, input jsonb, identity jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN count(*) > 0 THEN array_agg(
        CASE WHEN c.v->>'key' IS NULL THEN '' ELSE (c.v->>'key') || '=' || (
            SELECT CASE WHEN octet_length(x) > 200 THEN 'md5:' || md5(x) ELSE x END
            FROM (SELECT coalesce(jsonb_build_object('input', input, 'identity', identity)
                #>> string_to_array(c.v->>'key', '.'), '') AS x) val)
        END ORDER BY c.ord) END
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(config->'concurrency') = 'array'
        THEN config->'concurrency' ELSE '[]' END) WITH ORDINALITY AS c(v, ord)
$$;

CREATE FUNCTION stepgate.slot_limits(config jsonb) RETURNS integer[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN count(*) > 0 THEN array_agg((c.v->>'limit')::integer ORDER BY c.ord) END
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(config->'concurrency') = 'array'
        THEN config->'concurrency' ELSE '[]' END) WITH ORDINALITY AS c(v, ord)
$$;

-- held_reason says why a run waits for key, for people.
CREATE FUNCTION stepgate.held_reason(key text, lim integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN key = '' THEN format('waiting for one of the function''s %s concurrency slots', lim)
        ELSE format('waiting for a concurrency slot of key %s (limit %s)', key, lim) END
$$;

-- refill_slot wakes the runs waiting in key's line that its free slots can take; see
-- the top of this file.
CREATE FUNCTION stepgate.refill_slot(p_tenant text, p_function text, p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_running integer;
    v_lim integer;
    v_woken integer;
    q record;
BEGIN
    -- The row lock orders refills of one key with its claims and releases.
    SELECT running, lim INTO v_running, v_lim FROM stepgate.concurrency_slot
    WHERE tenant = p_tenant AND function = p_function AND key = p_key FOR UPDATE;
    v_running := coalesce(v_running, 0);
    SELECT count(*) INTO v_woken FROM stepgate.run
    WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
      AND status IN ('queued', 'scheduled', 'suspended') AND wake_at < 'infinity';
    -- Waiting runs' rows are locked after the counter's, as a claim never does (see
    -- claim_slots); a run's row is otherwise locked only briefly (a waiter attaching, an
    -- event resuming it), or by its cancellation, which refills only for a woken run,
    -- and woken runs are not selected here.
    FOR q IN
        SELECT id, slot_keys, slot_limits FROM stepgate.run
        WHERE tenant = p_tenant AND function = p_function AND held_on = p_key
          AND status IN ('queued', 'scheduled', 'suspended') AND wake_at = 'infinity'
        ORDER BY created_at, id
        FOR UPDATE
    LOOP
        -- Each run by its own limit (its revision's), so that none is woken only to be
        -- held again; the oldest first, so a run is not passed over.
        EXIT WHEN v_running + v_woken >= coalesce(q.slot_limits[array_position(q.slot_keys, p_key)], v_lim, 1);
        UPDATE stepgate.run SET wake_at = now() WHERE id = q.id;
        PERFORM pg_notify('stepgate_slot_free', q.id::text);
        v_woken := v_woken + 1;
    END LOOP;
END
$$;

-- claim_slots takes a slot of each of the run's keys for its claim, or holds the run.
-- It returns NULL when the claim may go on (the run is due and its slots are taken, or
-- it needs none), '' when the run is not due (nothing changes), or else why the run is
-- held. The run's row stays locked until the caller's transaction ends.
--
-- A key has room for the run when its running runs and the runs older than this one
-- waiting in its line are fewer than its limit: so runs start in creation order per key,
-- the oldest waiting run never yields to a younger one, and a run held behind older
-- woken runs is not woken again before them (refill_slot wakes oldest first).
--
-- Locks: the counter rows first, in key order, and the run's row last, as a release
-- (the run's row, then counters, then waiting runs' rows) would meet them: a claim
-- waiting for a counter holds no run's row, so the two never wait on each other in a
-- cycle. The run's keys are read before its lock: they never change.
CREATE FUNCTION stepgate.claim_slots(p_run uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    i integer;
    k text;
    lim integer;
    v_running integer;
    v_ahead integer;
    taken text[] := '{}';
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
    IF r.slot_keys IS NOT NULL THEN
        FOR i IN SELECT u.ord FROM unnest(r.slot_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.key LOOP
            k := r.slot_keys[i];
            lim := r.slot_limits[i];
            SELECT s.running INTO v_running FROM stepgate.concurrency_slot s
            WHERE s.tenant = r.tenant AND s.function = r.function AND s.key = k FOR UPDATE;
            SELECT count(*) INTO v_ahead FROM (
                SELECT 1 FROM stepgate.run q
                WHERE q.tenant = r.tenant AND q.function = r.function AND q.held_on = k
                  AND q.status IN ('queued', 'scheduled', 'suspended')
                  AND (q.created_at, q.id) < (r.created_at, r.id)
                LIMIT lim) older;
            IF coalesce(v_running, 0) + v_ahead >= lim THEN
                blocked := i;
                EXIT;
            END IF;
            INSERT INTO stepgate.concurrency_slot AS s (tenant, function, key, running, lim)
            VALUES (r.tenant, r.function, k, 1, lim)
            ON CONFLICT (tenant, function, key) DO UPDATE SET running = s.running + 1, lim = excluded.lim
                WHERE s.running < excluded.lim;
            IF NOT FOUND THEN
                blocked := i;
                EXIT;
            END IF;
            taken := taken || k;
        END LOOP;
    END IF;
    -- The run's lock; it may have been claimed meanwhile.
    PERFORM 1 FROM stepgate.run
    WHERE id = p_run AND (
        (status = 'queued' AND (wake_at IS NULL OR wake_at <= now())) OR
        (status IN ('suspended', 'scheduled') AND wake_at <= now()))
    FOR UPDATE;
    due := FOUND;
    IF NOT due OR blocked IS NOT NULL THEN
        -- Give back what was taken: the counters are locked by this transaction, so
        -- nobody saw them change.
        UPDATE stepgate.concurrency_slot SET running = running - 1
        WHERE tenant = r.tenant AND function = r.function AND key = ANY (taken);
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
        PERFORM stepgate.refill_slot(r.tenant, r.function, k);
    END LOOP;
    RETURN reason;
END
$$;

-- release_slots gives back the slots of a run that leaves 'running', or the slot
-- promised to a woken waiting run that ends without running, and wakes who can take
-- them. (A waiting run not woken yet holds nothing: its end wakes nobody.)
CREATE FUNCTION stepgate.release_slots() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    IF OLD.status = 'running' THEN
        FOR k IN SELECT unnest(NEW.slot_keys) ORDER BY 1 LOOP
            UPDATE stepgate.concurrency_slot SET running = running - 1
            WHERE tenant = NEW.tenant AND function = NEW.function AND key = k AND running > 0;
        END LOOP;
    END IF;
    FOR k IN SELECT unnest(CASE WHEN OLD.status = 'running' THEN NEW.slot_keys ELSE ARRAY[OLD.held_on] END) ORDER BY 1 LOOP
        PERFORM stepgate.refill_slot(NEW.tenant, NEW.function, k);
        -- A counter at 0 with nobody in its line goes: keys come and go.
        DELETE FROM stepgate.concurrency_slot s
        WHERE s.tenant = NEW.tenant AND s.function = NEW.function AND s.key = k AND s.running = 0
          AND NOT EXISTS (
            SELECT 1 FROM stepgate.run q
            WHERE q.tenant = NEW.tenant AND q.function = NEW.function AND q.held_on = k
              AND q.status IN ('queued', 'scheduled', 'suspended'));
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_releases_slots AFTER UPDATE OF status ON stepgate.run
    FOR EACH ROW
    WHEN ((OLD.status = 'running' AND NEW.status <> 'running' AND NEW.slot_keys IS NOT NULL)
        OR (OLD.held_on IS NOT NULL AND OLD.wake_at < 'infinity'
            AND NEW.status IN ('completed', 'failed', 'cancelled')
            AND OLD.status IN ('queued', 'scheduled', 'suspended')))
    EXECUTE FUNCTION stepgate.release_slots();

-- A held run's wake_at is 'infinity' (due for nobody); run events show none.
CREATE OR REPLACE FUNCTION stepgate.notify_run_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stepgate.run_watch w WHERE w.tenant = NEW.tenant AND w.expires_at > now()) THEN
        PERFORM pg_notify('stepgate_run_events', json_build_object('id', NEW.id, 'tenant', NEW.tenant,
            'function', NEW.function, 'status', NEW.status, 'attempts', NEW.attempts,
            'wake_at', nullif(NEW.wake_at, 'infinity'), 'finished_at', NEW.finished_at)::text);
    END IF;
    RETURN NULL;
END
$$;
