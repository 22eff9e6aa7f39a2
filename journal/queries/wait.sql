-- name: WaitLockEventName :exec
-- Taken by a wait that adds a shape of the event name; events take it shared.
SELECT pg_advisory_xact_lock(stepgate.wait_lock(@tenant, @event, NULL));

-- name: WaitLockMatch :exec
SELECT pg_advisory_xact_lock(stepgate.wait_lock(@tenant, @event, stepgate.match_of(@match)));

-- name: WaitEventStore :one
-- Journals the first event stored since @since that matches and that the run's
-- journal has not taken, or else stores the wait; returns whether it journaled one.
-- 'wait_event' and 'wait_any' are KindWaitEvent and KindWaitAny (a test checks them).
WITH cand AS MATERIALIZED (
    -- The tenant's events of the name since @since, through event_by_name (a look-back
    -- may reach back a month), that hold @contains: a cheap test every match passes
    -- (match_key, exact, costs tens of microseconds an event). Materialized, so that
    -- the LIMIT below cannot lead the planner to event_by_created for its order (every
    -- event of the tenant since @since). TestWaitEventLookBackUsesTheIndex checks the plan.
    SELECT e.id, e.name, e.data, e.identity, e.created_at FROM stepgate.event e
    WHERE e.tenant = @tenant AND e.name = @event AND e.created_at >= @since
      AND jsonb_build_object('id', e.id, 'name', e.name, 'data', e.data) @> @contains::jsonb
), ev AS (
    SELECT c.id, c.name, c.data, c.identity, c.created_at FROM cand c
    WHERE stepgate.match_key(@paths::text[], jsonb_build_object('id', c.id, 'name', c.name, 'data', c.data)) = stepgate.match_of(@match)
      AND stepgate.may_resume((SELECT fr.config FROM stepgate.run r
        JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
        WHERE r.id = @run_id), c.identity)
      AND NOT EXISTS (SELECT 1 FROM stepgate.journal_entry j
        WHERE j.tenant = @tenant AND j.run_id = @run_id AND ((j.kind = 'wait_event' AND j.output->'event'->>'id' = c.id)
            OR (j.kind = 'wait_any' AND j.output->'output'->'event'->>'id' = c.id)))
    ORDER BY c.created_at, c.id
    LIMIT 1
), out AS (
    SELECT jsonb_build_object('event', jsonb_build_object('id', id, 'name', name, 'data', data,
        'identity', identity, 'created_at', created_at)) AS output FROM ev
), entry AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
    SELECT @tenant, @run_id, @seq, stepgate.wait_kind(@alt, 'wait_event'), @name,
        stepgate.wait_output(@alt, 'wait_event', output), @invocation, now(),
        stepgate.journal_bytes_before(@tenant, @run_id, @seq) + octet_length(output::text)
    FROM out
), waiting AS (
    INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, event_name, match_key, expires_at)
    SELECT @run_id, @seq, @alt, @tenant, @name, 'wait_event', @event, stepgate.match_of(@match), sqlc.narg(expires_at)
    WHERE NOT EXISTS (SELECT 1 FROM ev)
)
SELECT EXISTS (SELECT 1 FROM ev);

-- name: WaitShapeAdd :one
-- Records the shape unless the tenant's waits on the event name have max_shapes:
-- inserted says it is new, known that it was there.
WITH ins AS (
    INSERT INTO stepgate.wait_shape (tenant, event_name, paths)
    SELECT @tenant, @event, @paths
    WHERE (SELECT count(*) FROM stepgate.wait_shape s WHERE s.tenant = @tenant AND s.event_name = @event) < sqlc.arg(max_shapes)::bigint
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins) AS inserted,
    EXISTS (SELECT 1 FROM stepgate.wait_shape s WHERE s.tenant = @tenant AND s.event_name = @event AND s.paths = @paths) AS known;

-- name: WaitRunDueNow :one
UPDATE stepgate.run SET wake_at = now() WHERE id = @id
RETURNING wake_at, clock_timestamp()::timestamptz AS clock;

-- name: WaitResumeLockEventName :exec
-- Shared: events do not wait for each other, only for a waiter adding a shape.
SELECT pg_advisory_xact_lock_shared(stepgate.wait_lock(@tenant, @event, NULL));

-- name: WaitResumeLockMatches :exec
-- The keys' locks, in one order, so two events never wait for each other in a cycle.
SELECT pg_advisory_xact_lock(l) FROM (
    SELECT DISTINCT stepgate.wait_lock(@tenant, @event, k) AS l FROM (
        SELECT stepgate.match_key(paths, @doc) AS k FROM stepgate.wait_shape
        WHERE tenant = @tenant AND event_name = @event) keys
    WHERE k IS NOT NULL
    ORDER BY l) ordered;

-- name: WaitResume :many
-- Resumes the waiters of an event (see ResumeWaiters); it must find them through the
-- index run_wait_by_match as the gateway's tenant role, whose row-level security
-- forbids a non-leakproof comparison (jsonb's) from using an index:
-- TestResumeWaitersUsesTheIndex checks the plan. 'wait_event' is KindWaitEvent.
WITH cand AS MATERIALIZED (
    -- One probe of the index per key. The keys are computed apart: a qual that
    -- calls match_key (not leakproof) on run_wait's side of the join could not
    -- be an index condition under row-level security.
    SELECT w.tenant, w.run_id, w.seq, w.alt, w.name FROM stepgate.run_wait w
    WHERE w.tenant = @tenant AND w.event_name = @event AND w.match_key = ANY (ARRAY(
        SELECT stepgate.match_key(s.paths, @doc) FROM stepgate.wait_shape s
        WHERE s.tenant = @tenant AND s.event_name = @event))
), woken AS (
    -- The run's row lock first, as a claim takes it before it deletes a wait
    -- that timed out: the two never wait for each other in a cycle.
    -- A run is resumed only by a sender who may resume it (its revision's
    -- invoke_roles and resume_roles); the others leave it waiting.
    UPDATE stepgate.run r SET wake_at = now() FROM cand, stepgate.function_revision fr
    WHERE r.tenant = cand.tenant AND r.id = cand.run_id AND r.tenant = @tenant AND r.status = 'suspended'
      AND fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
      AND stepgate.may_resume(fr.config, (SELECT e.identity FROM stepgate.event e WHERE e.tenant = @tenant AND e.id = @id))
    RETURNING r.id, r.tenant, r.invocation, cand.seq, cand.alt, cand.name
), gone AS (
    -- Only a wait this statement deletes is resumed: one that a concurrent
    -- claim (a timeout) or another resumer deleted first is theirs. The other
    -- alternatives of a wait_any go with it. (Each deleted row's run is read back from
    -- woken, one row a run, by entries: sqlc cannot type a RETURNING of woken's columns.)
    DELETE FROM stepgate.run_wait w USING woken WHERE w.tenant = woken.tenant AND w.run_id = woken.id AND w.seq = woken.seq
    RETURNING w.tenant, w.run_id
), out AS (
    SELECT jsonb_build_object('event', jsonb_build_object('id', e.id, 'name', e.name, 'data', e.data,
        'identity', e.identity, 'created_at', e.created_at)) AS output
    FROM stepgate.event e WHERE e.tenant = @tenant AND e.id = @id
), entries AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
    SELECT DISTINCT ON (woken.id) woken.tenant, woken.id, woken.seq, stepgate.wait_kind(woken.alt, 'wait_event'), woken.name,
        stepgate.wait_output(woken.alt, 'wait_event', out.output), woken.invocation, now(),
        stepgate.journal_bytes_before(woken.tenant, woken.id, woken.seq) + octet_length(out.output::text)
    FROM gone JOIN woken ON woken.tenant = gone.tenant AND woken.id = gone.run_id, out
    ON CONFLICT (tenant, run_id, seq) DO NOTHING
)
SELECT DISTINCT run_id::text FROM gone ORDER BY 1;

-- name: WaitAnyDeleteWaits :exec
DELETE FROM stepgate.run_wait WHERE tenant = @tenant AND run_id = @run_id AND seq = @seq;

-- name: AwaitSleep :exec
INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, wake_at, invocation, journal_bytes)
VALUES (@tenant, @run_id, @seq, @kind, @name, sqlc.narg(wake_at), @invocation, stepgate.journal_bytes_before(@tenant, @run_id, @seq));

-- name: AwaitStepFailure :exec
INSERT INTO stepgate.attempt_failure (tenant, run_id, seq, attempt, name, error)
VALUES (@tenant, @run_id, @seq, @attempt, @name, @error) ON CONFLICT DO NOTHING;

-- name: AwaitEntryWakeAt :one
SELECT e.wake_at FROM stepgate.run r JOIN stepgate.journal_entry e ON e.tenant = r.tenant AND e.run_id = r.id
WHERE r.id = @run_id AND e.seq = @seq;
