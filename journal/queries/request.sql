-- Requests (POST /v1/runs/{id}/requests): messages on a topic request:<name>, and the
-- run's reply entries (kind 'reply') named after their ids. A request's status is
-- derived from the two and the run's status, read in one statement.

-- name: RequestPending :one
-- Counts, up to max, the run's requests that no reply entry answers.
SELECT count(*) AS pending FROM (
    SELECT 1 FROM stepgate.message m
    WHERE m.tenant = @tenant AND m.run_id = @run_id AND m.topic LIKE 'request:%'
        AND NOT EXISTS (SELECT 1 FROM stepgate.journal_entry e
            WHERE e.tenant = m.tenant AND e.run_id = @run_id AND e.kind = 'reply' AND e.name = m.id)
    LIMIT sqlc.arg(max)::bigint) p;

-- name: RequestForReply :one
-- The message id of the run, for its reply at seq: its topic, the seq of the receive that
-- took it (NULL while it waits in the mailbox), and the seq of a reply to it at another
-- seq (0 for none).
SELECT m.topic, m.consumed_seq,
    coalesce((SELECT min(e.seq) FROM stepgate.journal_entry e
        WHERE e.tenant = m.tenant AND e.run_id = @run_id AND e.kind = 'reply' AND e.name = @id AND e.seq <> sqlc.arg(seq)::int), 0)::int AS replied_seq
FROM stepgate.message m
WHERE m.tenant = (SELECT r.tenant FROM stepgate.run r WHERE r.id = @run_id) AND m.run_id = @run_id AND m.id = @id;

-- name: RequestsOfRun :many
-- The run's requests, newest first, below the message n before (0: from the newest), at
-- most max, each with its first reply entry (reply_seq 0 for none: then replied_at is meaningless)
-- and the run's status.
SELECT m.n, m.id, m.topic, m.data, m.created_at, m.consumed_seq,
    coalesce(r.seq, 0)::int AS reply_seq, r.output AS reply, r.error AS reply_error, coalesce(r.finished_at, m.created_at) AS replied_at,
    run.status AS run_status
FROM stepgate.run run
JOIN stepgate.message m ON m.tenant = run.tenant AND m.run_id = run.id
LEFT JOIN LATERAL (
    SELECT DISTINCT ON (e.name) e.name, e.seq, e.output, e.error, e.finished_at
    FROM stepgate.journal_entry e WHERE e.tenant = run.tenant AND e.run_id = @run_id AND e.kind = 'reply'
    ORDER BY e.name, e.seq
) r ON r.name = m.id
WHERE run.id = @run_id AND run.tenant = @tenant AND m.topic LIKE 'request:%'
    AND (sqlc.arg(before)::bigint = 0 OR m.n < sqlc.arg(before)::bigint)
ORDER BY m.n DESC LIMIT sqlc.arg(max)::bigint;

-- name: RequestOfRun :one
-- A request of the run with its first reply entry (reply_seq 0 for none: then replied_at
-- is meaningless) and the run's status.
SELECT m.n, m.id, m.topic, m.data, m.created_at, m.consumed_seq,
    coalesce(r.seq, 0)::int AS reply_seq, r.output AS reply, r.error AS reply_error, coalesce(r.finished_at, m.created_at) AS replied_at,
    run.status AS run_status
FROM stepgate.run run
JOIN stepgate.message m ON m.tenant = run.tenant AND m.run_id = run.id AND m.id = @id
LEFT JOIN LATERAL (
    SELECT e.name, e.seq, e.output, e.error, e.finished_at
    FROM stepgate.journal_entry e WHERE e.tenant = run.tenant AND e.run_id = @run_id AND e.kind = 'reply' AND e.name = @id
    ORDER BY e.seq LIMIT 1
) r ON true
WHERE run.id = @run_id AND run.tenant = @tenant AND m.topic LIKE 'request:%';

-- name: RequestCopiedForReply :one
-- For a reply at seq of a run rerun from a step, whose receive of the request was copied
-- from the run it reruns (the request is in that run's mailbox, not this one's): the seq
-- of the copied receive entry (alone or in a wait_any) that took the request id on a
-- request topic, and the seq of a reply to it at another seq (0 for none).
SELECT e.seq AS received_seq,
    coalesce((SELECT min(r.seq) FROM stepgate.journal_entry r
        WHERE r.tenant = run.tenant AND r.run_id = @run_id AND r.kind = 'reply' AND r.name = @id AND r.seq <> sqlc.arg(seq)::int), 0)::int AS replied_seq
FROM stepgate.run run JOIN stepgate.journal_entry e ON e.tenant = run.tenant AND e.run_id = run.id
WHERE run.id = @run_id AND e.copied_from IS NOT NULL AND e.seq < sqlc.arg(seq)::int
    AND e.kind IN ('receive', 'wait_any')
    AND coalesce(e.output->'message', e.output->'output'->'message')->>'id' = @id
    AND coalesce(e.output->'message', e.output->'output'->'message')->>'topic' LIKE 'request:%'
ORDER BY e.seq LIMIT 1;
