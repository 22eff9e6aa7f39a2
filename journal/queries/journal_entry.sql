-- name: EntryAppendInOrder :one
-- The statement of AppendEntry for an entry right after the last of the journal: the
-- step path, as lean as it was before windows. With skip_locked (a batch's entries) it
-- does not wait for a lock on the row of the run (taken by a lease renewal, a claim, a
-- finish), which could close a cycle with another batch or a statement locking several
-- runs; its entry, seen as not owned, is written alone after the batch. A locking clause
-- cannot be a parameter, so each way of locking has its own CTE, and the flag lets one
-- of them see the row: the other locks nothing.
WITH owner_waits AS (
    SELECT r.id, r.tenant FROM stepgate.run r
    WHERE NOT sqlc.arg(skip_locked)::bool
        AND r.id = sqlc.arg(run_id) AND r.invocation = sqlc.arg(invocation) AND r.status = 'running' FOR SHARE
), owner_skips AS (
    SELECT r.id, r.tenant FROM stepgate.run r
    WHERE sqlc.arg(skip_locked)::bool
        AND r.id = sqlc.arg(run_id) AND r.invocation = sqlc.arg(invocation) AND r.status = 'running' FOR SHARE SKIP LOCKED
), owner AS (
    SELECT id, tenant FROM owner_waits UNION ALL SELECT id, tenant FROM owner_skips
), prev AS (
    SELECT coalesce(p.journal_bytes, 0) AS journal_bytes FROM stepgate.journal_entry p
    WHERE p.tenant = (SELECT o.tenant FROM owner o) AND p.run_id = sqlc.arg(run_id) AND p.seq = sqlc.arg(seq) - 1
), ok AS (
    -- In order: right after seq - 1, and not into a hole below later entries (a fill
    -- declares a window, so the totals above it are kept).
    SELECT owner.id, owner.tenant, coalesce((SELECT journal_bytes FROM prev), 0) + sqlc.arg(size)::bigint AS total FROM owner
    WHERE (@seq = 1 OR EXISTS (SELECT 1 FROM prev))
        AND NOT EXISTS (SELECT 1 FROM stepgate.journal_entry l WHERE l.tenant = owner.tenant AND l.run_id = sqlc.arg(run_id) AND l.seq > sqlc.arg(seq))
), ins AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, error, attempt,
        wake_at, invocation, started_at, journal_bytes)
    SELECT ok.tenant, ok.id, sqlc.arg(seq), sqlc.arg(kind), sqlc.arg(name), sqlc.arg(output), sqlc.arg(error), sqlc.arg(attempt), sqlc.arg(wake_at), sqlc.arg(invocation), sqlc.arg(started_at), ok.total FROM ok
    WHERE (sqlc.arg(max_entries)::int = 0 OR sqlc.arg(seq) <= sqlc.arg(max_entries)::int) AND (sqlc.arg(max_bytes)::int = 0 OR ok.total <= sqlc.arg(max_bytes)::int)
    ON CONFLICT (tenant, run_id, seq) DO NOTHING
    RETURNING seq
)
SELECT EXISTS (SELECT 1 FROM owner) AS owned, EXISTS (SELECT 1 FROM ins) AS inserted, EXISTS (SELECT 1 FROM ok) AS follows,
    (SELECT total FROM ok) AS total, e.kind, e.name, e.output, e.error
FROM (SELECT 1) one
LEFT JOIN stepgate.journal_entry e ON e.tenant = (SELECT o.tenant FROM owner o) AND e.run_id = sqlc.arg(run_id) AND e.seq = sqlc.arg(seq);

-- name: EntryAppendInWindow :one
-- The statement of AppendEntry for an entry with a window: it may fill a hole, whose entries
-- above gain its bytes.
WITH owner AS (
    SELECT r.id, r.tenant FROM stepgate.run r
    WHERE r.id = sqlc.arg(run_id) AND r.invocation = sqlc.arg(invocation) AND r.status = 'running' FOR SHARE
), prev AS (
    SELECT coalesce(p.journal_bytes, 0) AS journal_bytes FROM stepgate.journal_entry p
    WHERE p.tenant = (SELECT o.tenant FROM owner o) AND p.run_id = sqlc.arg(run_id)
        AND p.seq < sqlc.arg(seq) AND p.seq >= sqlc.arg(seq) - sqlc.arg(window_size)::int
    ORDER BY p.seq DESC LIMIT 1
), top AS (
    -- Entries above: this one fills a hole left by parallel steps.
    SELECT t.journal_bytes FROM stepgate.journal_entry t
    WHERE t.tenant = (SELECT o.tenant FROM owner o) AND t.run_id = sqlc.arg(run_id) AND t.seq > sqlc.arg(seq)
    ORDER BY t.seq DESC LIMIT 1
), ok AS (
    SELECT owner.id, owner.tenant, coalesce((SELECT journal_bytes FROM prev), stepgate.journal_bytes_before(owner.tenant, sqlc.arg(run_id), sqlc.arg(seq))) + sqlc.arg(size)::bigint AS total,
        coalesce((SELECT journal_bytes FROM top), 0) + sqlc.arg(size)::bigint AS top_total
    FROM owner
    WHERE sqlc.arg(seq) <= sqlc.arg(window_size)::int OR EXISTS (SELECT 1 FROM prev)
), ins AS (
    INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, error, attempt,
        wake_at, invocation, started_at, journal_bytes)
    SELECT ok.tenant, ok.id, sqlc.arg(seq), sqlc.arg(kind), sqlc.arg(name), sqlc.arg(output), sqlc.arg(error), sqlc.arg(attempt), sqlc.arg(wake_at), sqlc.arg(invocation), sqlc.arg(started_at), ok.total FROM ok
    WHERE (sqlc.arg(max_entries)::int = 0 OR sqlc.arg(seq) <= sqlc.arg(max_entries)::int) AND (sqlc.arg(max_bytes)::int = 0 OR greatest(ok.total, ok.top_total) <= sqlc.arg(max_bytes)::int)
    ON CONFLICT (tenant, run_id, seq) DO NOTHING
    RETURNING seq
), above AS (
    UPDATE stepgate.journal_entry a SET journal_bytes = a.journal_bytes + sqlc.arg(size)::bigint
    WHERE a.tenant = (SELECT o.tenant FROM owner o) AND a.run_id = sqlc.arg(run_id) AND a.seq > sqlc.arg(seq) AND EXISTS (SELECT 1 FROM ins) AND EXISTS (SELECT 1 FROM top)
)
SELECT EXISTS (SELECT 1 FROM owner) AS owned, EXISTS (SELECT 1 FROM ins) AS inserted, EXISTS (SELECT 1 FROM ok) AS follows,
    (SELECT greatest(total, top_total) FROM ok) AS total, e.kind, e.name, e.output, e.error
FROM (SELECT 1) one
LEFT JOIN stepgate.journal_entry e ON e.tenant = (SELECT o.tenant FROM owner o) AND e.run_id = sqlc.arg(run_id) AND e.seq = sqlc.arg(seq);

-- name: EntryLockRun :execrows
-- Locks the run for a windowed entry, before the entry's statement takes its snapshot.
SELECT 1 FROM stepgate.run WHERE id = @run_id AND invocation = @invocation AND status = 'running' FOR UPDATE;

-- name: EntryExists :one
-- The statements below name only the run: its tenant, which leads the entries' key, is
-- read from the run in the statement.
SELECT EXISTS (SELECT 1 FROM stepgate.journal_entry e WHERE e.tenant = (SELECT t.tenant FROM stepgate.run t WHERE t.id = @run_id) AND e.run_id = @run_id AND e.seq = @seq);

-- name: EntryAt :one
SELECT e.seq, e.kind, e.name, e.output, e.error, e.attempt, e.wake_at, e.started_at, e.finished_at,
    e.copied_from IS NOT NULL AS copied
FROM stepgate.journal_entry e WHERE e.tenant = (SELECT t.tenant FROM stepgate.run t WHERE t.id = @run_id) AND e.run_id = @run_id AND e.seq = @seq;

-- name: EntryHoles :one
-- Why an answered end found no run: whether the invocation owns it, the journal's last
-- seq, how many seqs below it are missing, and the first ten of them.
WITH r AS (SELECT r.tenant, r.invocation, r.status FROM stepgate.run r WHERE r.id = @run_id),
j AS (SELECT coalesce(max(e.seq), 0) AS top, count(*) AS n FROM stepgate.journal_entry e WHERE e.tenant = (SELECT r.tenant FROM r) AND e.run_id = @run_id)
SELECT coalesce((SELECT r.invocation = @invocation AND r.status = 'running' FROM r), false) AS owned,
    j.top, j.top - j.n AS missing_count,
    ARRAY(SELECT s::int FROM generate_series(1, j.top - 1) s
        WHERE NOT EXISTS (SELECT 1 FROM stepgate.journal_entry e WHERE e.tenant = (SELECT r.tenant FROM r) AND e.run_id = @run_id AND e.seq = s)
        ORDER BY s LIMIT 10) AS missing
FROM j;

-- name: EntryInvokeRefused :exec
-- Journals the error of a child run that could not start, at the invoke's seq.
WITH r AS (SELECT r.tenant FROM stepgate.run r WHERE r.id = @run_id)
INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, error, invocation, started_at, journal_bytes)
VALUES ((SELECT r.tenant FROM r), @run_id, @seq, 'invoke', @name, sqlc.arg(error)::jsonb, @invocation, now(),
    stepgate.journal_bytes_before((SELECT r.tenant FROM r), @run_id, @seq) + octet_length(sqlc.arg(error)::jsonb::text));

-- name: EntryBatchLockTimeout :exec
-- Opens a batch of appends: within it, a statement waits at most 50 ms for a lock.
SELECT set_config('lock_timeout', '50ms', true);
