-- name: EventSend :one
-- Run ids are UUIDv7, as the gateway makes them, for the index locality of time order.
-- targets is materialized (a volatile CTE read twice), so the event's runs are the
-- runs inserted. The priority 2 is DefaultPriority; the array of flowed's ?| is
-- flowKeys (a test checks both).
WITH targets AS MATERIALIZED (
    SELECT f.name, f.revision, r.run_timeout_ms,
        coalesce((r.config->>'priority')::smallint, 2) AS priority,
        r.config ?| array['throttle', 'rate_limit', 'debounce'] AS flowed,
        encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid AS run_id
    FROM stepgate.function f
    JOIN stepgate.function_revision r USING (tenant, name, revision)
    WHERE f.tenant = @tenant
      AND r.config->'triggers' @> jsonb_build_array(jsonb_build_object('event', @name::text))
      AND stepgate.may_invoke(r.config, @checked, @roles::text[])
), ins AS (
    INSERT INTO stepgate.event (tenant, id, name, data, identity, source_run_id, runs)
    SELECT @tenant, @id, @name, @data, @identity, sqlc.narg(source_run_id), coalesce(array_agg(run_id ORDER BY name) FILTER (WHERE NOT flowed), '{}') FROM targets
    HAVING (@max_runs::bigint <= 0 OR count(*) FILTER (WHERE NOT flowed) = 0
        OR (SELECT coalesce(sum(u.runs), 0) FROM stepgate.tenant_usage u WHERE u.tenant = @tenant) + count(*) FILTER (WHERE NOT flowed) <= @max_runs::bigint)
    AND (@max_journal_bytes::bigint <= 0 OR count(*) FILTER (WHERE NOT flowed) = 0
        OR (SELECT coalesce(sum(u.journal_bytes), 0) FROM stepgate.tenant_usage u WHERE u.tenant = @tenant) < @max_journal_bytes::bigint)
    AND (@max_event_bytes::bigint <= 0
        OR (SELECT coalesce(sum(u.event_bytes), 0) FROM stepgate.tenant_usage u WHERE u.tenant = @tenant) + octet_length((@data::jsonb)::text) <= @max_event_bytes::bigint)
    ON CONFLICT (tenant, id) DO NOTHING
    RETURNING tenant, id, name, data, identity, source_run_id, runs::text[], skipped, created_at
), runs AS (
    INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, deadline, priority)
    SELECT t.run_id, @tenant, t.name, t.revision, 'queued', @data, @identity, now() + t.run_timeout_ms * interval '1 millisecond', t.priority
    FROM targets t WHERE NOT t.flowed AND EXISTS (SELECT 1 FROM ins)
    RETURNING id, tenant, function, status, attempts, wake_at, finished_at
)
SELECT ins.tenant, ins.id, ins.name, ins.data, ins.identity, ins.source_run_id, ins.runs, ins.skipped, ins.created_at,
    ARRAY(SELECT name FROM targets WHERE flowed ORDER BY name)::text[] AS flowed
FROM ins;

-- name: EventGet :one
SELECT tenant, id, name, data, identity, source_run_id, runs::text[], skipped, created_at
FROM stepgate.event WHERE tenant = @tenant AND id = @id;

-- name: EventList :many
SELECT tenant, id, name, data, identity, source_run_id, runs::text[], skipped, created_at
FROM stepgate.event
WHERE tenant = @tenant
  AND (@name::text = '' OR name = @name)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL OR (created_at, id) < (sqlc.narg(after_created_at), sqlc.narg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max)::bigint;
