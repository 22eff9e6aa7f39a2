-- name: ConcurrencyQueueCounts :one
-- Each count reads a partial index of unfinished runs (run_due, run_expired_lease),
-- never the function's history.
SELECT (SELECT count(*) FROM stepgate.run q WHERE q.tenant = @tenant AND q.function = @function AND q.status = 'queued') AS queued,
    (SELECT count(*) FROM stepgate.run l WHERE l.tenant = @tenant AND l.function = @function AND l.lease_until IS NOT NULL) AS running,
    (SELECT count(*) FROM stepgate.run h WHERE h.tenant = @tenant AND h.function = @function AND h.held IS NOT NULL
        AND h.status IN ('queued', 'scheduled', 'suspended')) AS held;

-- name: ConcurrencyQueueKeys :many
SELECT coalesce(s.key, h.key)::text AS key, coalesce(s.running, 0) AS running,
    coalesce(s.lim, 0)::int AS lim, coalesce(h.held, 0) AS held
FROM (
    -- Every running run with slot keys holds a slot of each (run_slot_running).
    SELECT k.key, count(*)::int AS running, max(r.slot_limits[k.ord]) AS lim
    FROM stepgate.run r, unnest(r.slot_keys) WITH ORDINALITY AS k(key, ord)
    WHERE r.tenant = @tenant AND r.function = @function AND r.status = 'running' AND r.slot_keys IS NOT NULL
    GROUP BY k.key) s
FULL JOIN (
    SELECT held_on AS key, count(*) AS held FROM stepgate.run
    WHERE tenant = @tenant AND function = @function AND held_on IS NOT NULL
        AND status IN ('queued', 'scheduled', 'suspended')
    GROUP BY held_on) h USING (key)
ORDER BY coalesce(s.running, 0) + coalesce(h.held, 0) DESC, 1
LIMIT @max_keys;

-- name: ConcurrencyQueueReasons :many
SELECT held AS reason, count(*) AS runs FROM stepgate.run
WHERE tenant = @tenant AND function = @function AND held IS NOT NULL
    AND status IN ('queued', 'scheduled', 'suspended')
GROUP BY held ORDER BY 2 DESC, 1 LIMIT @max_keys;
