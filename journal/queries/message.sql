-- name: MessageLockTarget :one
-- may_resume: whether the sender's identity may resume the run.
SELECT r.status, r.function, fr.config, stepgate.may_resume(fr.config, sqlc.arg(identity)::jsonb) AS may_resume
FROM stepgate.run r
JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
WHERE r.id = @run_id AND r.tenant = @tenant
FOR UPDATE OF r;

-- name: MessageByID :one
SELECT run_id::text, id, topic, data, identity, source_run_id, created_at, consumed_seq
FROM stepgate.message WHERE tenant = @tenant AND run_id = @run_id AND id = @id;

-- name: MessageDeliveryState :one
-- The run's wait for a receive of the topic, if any (NULL, which sqlc does not see:
-- scan wait_seq, wait_name and wait_alt into pointers); its unconsumed messages,
-- counted up to max_unconsumed; the message's size; and the tenant's mailbox bytes.
SELECT (SELECT w.seq FROM stepgate.run_wait w WHERE w.tenant = sqlc.arg(tenant)::text AND w.run_id = @run_id AND w.kind = 'receive' AND w.topic = sqlc.arg(topic)::text) AS wait_seq,
    (SELECT w.name FROM stepgate.run_wait w WHERE w.tenant = @tenant AND w.run_id = @run_id AND w.kind = 'receive' AND w.topic = @topic) AS wait_name,
    (SELECT w.alt FROM stepgate.run_wait w WHERE w.tenant = @tenant AND w.run_id = @run_id AND w.kind = 'receive' AND w.topic = @topic) AS wait_alt,
    (SELECT count(*) FROM (SELECT 1 FROM stepgate.message m
        WHERE m.tenant = @tenant AND m.run_id = @run_id AND m.consumed_seq IS NULL LIMIT sqlc.arg(max_unconsumed)::bigint) c) AS unconsumed,
    octet_length(sqlc.arg(data)::jsonb::text)::bigint AS size,
    (SELECT coalesce(sum(u.mailbox_bytes), 0) FROM stepgate.tenant_usage u WHERE u.tenant = @tenant)::bigint AS mailbox_bytes;

-- name: MessageStore :one
-- Stores the message, consumed at once by the run's receive at seq when consume: then
-- it is journaled there (of kind receive, or wrapped for a wait_any's alternative alt),
-- the wait deleted and the run due now.
WITH m AS (
    INSERT INTO stepgate.message (tenant, run_id, id, topic, data, identity, source_run_id, consumed_seq)
    VALUES (@tenant, @run_id, @id, @topic, @data, @identity, @source_run_id,
        CASE WHEN sqlc.arg(consume)::boolean THEN sqlc.arg(seq)::int END)
    RETURNING *
), gone AS (
    DELETE FROM stepgate.run_wait w WHERE w.tenant = @tenant AND w.run_id = @run_id AND w.seq = sqlc.arg(seq)::int AND sqlc.arg(consume)::boolean
), out AS (
    SELECT jsonb_build_object('message', jsonb_build_object('id', m.id, 'topic', m.topic, 'data', m.data,
        'identity', m.identity, 'sent_at', m.created_at) || CASE WHEN m.source_run_id IS NULL THEN '{}'::jsonb
        ELSE jsonb_build_object('source_run_id', m.source_run_id) END) AS output
    FROM m WHERE sqlc.arg(consume)::boolean
), entry AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
    SELECT r.tenant, r.id, sqlc.arg(seq)::int, stepgate.wait_kind(@alt, 'receive'), @name,
        stepgate.wait_output(@alt, 'receive', out.output), r.invocation, now(),
        stepgate.journal_bytes_before(r.tenant, r.id, sqlc.arg(seq)::int) + octet_length(out.output::text)
    FROM out, stepgate.run r WHERE r.id = @run_id AND r.tenant = @tenant
    ON CONFLICT (tenant, run_id, seq) DO NOTHING
), woken AS (
    UPDATE stepgate.run r SET wake_at = now() WHERE r.id = @run_id AND r.tenant = @tenant AND sqlc.arg(consume)::boolean
)
SELECT m.run_id::text AS run_id, m.id, m.topic, m.data, m.identity, m.source_run_id,
    m.created_at, m.consumed_seq
FROM m;

-- name: MessageReceive :one
-- Takes the oldest unconsumed message of the topic for the receive at seq and journals
-- it (of kind receive, or wrapped for a wait_any's alternative alt); or, when there is
-- none, stores the wait. taken says which.
WITH oldest AS (
    SELECT o.id, o.tenant FROM stepgate.message o
    WHERE o.tenant = @tenant AND o.run_id = @run_id AND o.topic = @topic AND o.consumed_seq IS NULL
    ORDER BY o.n LIMIT 1
), m AS (
    UPDATE stepgate.message m SET consumed_seq = sqlc.arg(seq)::int FROM oldest
    WHERE m.tenant = @tenant AND m.tenant = oldest.tenant AND m.run_id = @run_id AND m.id = oldest.id
    RETURNING m.*
), out AS (
    SELECT jsonb_build_object('message', jsonb_build_object('id', m.id, 'topic', m.topic, 'data', m.data,
        'identity', m.identity, 'sent_at', m.created_at) || CASE WHEN m.source_run_id IS NULL THEN '{}'::jsonb
        ELSE jsonb_build_object('source_run_id', m.source_run_id) END) AS output
    FROM m
), entry AS (
    INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes, tenant)
    SELECT @run_id, @seq, stepgate.wait_kind(@alt, 'receive'), @name,
        stepgate.wait_output(@alt, 'receive', output), @invocation, now(),
        stepgate.journal_bytes_before(@tenant, @run_id, @seq) + octet_length(output::text), @tenant
    FROM out
), waiting AS (
    INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, topic, expires_at)
    SELECT @run_id, @seq, @alt, @tenant, @name, 'receive', @topic, @expires_at
    WHERE NOT EXISTS (SELECT 1 FROM oldest)
)
SELECT EXISTS (SELECT 1 FROM oldest) AS taken;

-- name: MessageSenderRun :one
SELECT tenant, identity FROM stepgate.run WHERE id = @run_id;

-- name: MessageLockRuns :many
-- Locks the runs of the tenant among ids, in id order; may_resume: whether identity may
-- resume the run.
SELECT r.id::text AS id, r.status, r.invocation, r.function, fr.config,
    stepgate.may_resume(fr.config, sqlc.arg(identity)::jsonb) AS may_resume
FROM stepgate.run r
JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
WHERE r.id = ANY(sqlc.arg(ids)::uuid[]) AND r.tenant = @tenant ORDER BY r.id FOR UPDATE OF r;

-- name: MessageGet :one
SELECT run_id::text, id, topic, data, identity, source_run_id, created_at, consumed_seq
FROM stepgate.message WHERE tenant = @tenant AND run_id = @run_id AND id = @id;
