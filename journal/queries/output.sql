-- name: ValueGet :one
SELECT e.name, e.output, e.seq, e.finished_at FROM stepgate.journal_entry e
JOIN stepgate.run r ON r.id = e.run_id AND r.tenant = e.tenant
WHERE e.tenant = @tenant AND e.run_id = @run_id AND e.kind = 'value' AND e.name = @key
ORDER BY e.seq DESC LIMIT 1;

-- name: ValueList :many
-- The latest value of each key, by key.
SELECT DISTINCT ON (e.name) e.name, e.output, e.seq, e.finished_at FROM stepgate.journal_entry e
JOIN stepgate.run r ON r.id = e.run_id AND r.tenant = e.tenant
WHERE e.tenant = @tenant AND e.run_id = @run_id AND e.kind = 'value'
ORDER BY e.name, e.seq DESC;

-- name: OutputNotify :exec
-- On channel stepgate_run_output (output.OutputChannel, journal/output), when a reader has attached.
SELECT pg_notify('stepgate_run_output', id::text) FROM stepgate.run WHERE id = @run_id AND notify;

-- name: StreamWriter :one
-- The run, when the invocation owns it, share-locked, with its tenant's stream bytes.
SELECT r.tenant, r.notify,
    (SELECT coalesce(sum(u.stream_bytes), 0) FROM stepgate.tenant_usage u WHERE u.tenant = r.tenant)::bigint AS stream_bytes
FROM stepgate.run r
WHERE r.id = @run_id AND r.invocation = @invocation AND r.status = 'running' FOR SHARE OF r;

-- name: StreamCount :one
SELECT count(*) FROM stepgate.stream WHERE tenant = @tenant AND run_id = @run_id;

-- name: StreamCreate :exec
INSERT INTO stepgate.stream (tenant, run_id, key) VALUES (@tenant, @run_id, @key)
ON CONFLICT (tenant, run_id, key) DO NOTHING;

-- name: StreamLock :one
SELECT key, length, bytes, closed_at, created_at FROM stepgate.stream
WHERE tenant = @tenant AND run_id = @run_id AND key = @key FOR UPDATE;

-- name: StreamWrittenPlaces :many
-- The places from from_index to below to_index of (at_seq, at_attempt) that the stream holds.
SELECT at_index FROM stepgate.stream_chunk
WHERE tenant = @tenant AND run_id = @run_id AND key = @key AND at_seq = @at_seq AND at_attempt = @at_attempt
    AND at_index >= sqlc.arg(from_index)::int AND at_index < sqlc.arg(to_index)::int;

-- name: StreamAppendChunks :exec
-- Appends chunks, each written at its place, from position first_pos on.
INSERT INTO stepgate.stream_chunk (tenant, run_id, key, pos, data, at_seq, at_attempt, at_index)
SELECT @tenant, @run_id, @key, sqlc.arg(first_pos)::bigint + u.ord - 1, u.data, @at_seq, @at_attempt, u.place
FROM ROWS FROM (unnest(sqlc.arg(chunks)::jsonb[]), unnest(sqlc.arg(places)::int[])) WITH ORDINALITY AS u(data, place, ord);

-- name: StreamAdvance :one
UPDATE stepgate.stream SET length = length + sqlc.arg(chunks)::int, bytes = bytes + sqlc.arg(bytes)::bigint,
    closed_at = CASE WHEN sqlc.arg(close)::boolean THEN coalesce(closed_at, now()) ELSE closed_at END
WHERE tenant = @tenant AND run_id = @run_id AND key = @key
RETURNING key, length, bytes, closed_at, created_at;

-- name: StreamGet :one
SELECT key, length, bytes, closed_at, created_at FROM stepgate.stream
WHERE tenant = @tenant AND run_id = @run_id AND key = @key;

-- name: StreamList :many
SELECT key, length, bytes, closed_at, created_at FROM stepgate.stream
WHERE tenant = @tenant AND run_id = @run_id ORDER BY key;

-- name: StreamReadChunks :many
SELECT pos, data FROM stepgate.stream_chunk
WHERE tenant = @tenant AND run_id = @run_id AND key = @key AND pos >= @from_pos
ORDER BY pos LIMIT sqlc.arg(max_chunks)::bigint;
