-- name: UsageOf :one
SELECT coalesce(sum(runs), 0)::bigint AS runs, coalesce(sum(stream_bytes), 0)::bigint AS stream_bytes,
    coalesce(sum(mailbox_bytes), 0)::bigint AS mailbox_bytes, coalesce(sum(event_bytes), 0)::bigint AS event_bytes,
    coalesce(sum(journal_bytes), 0)::bigint AS journal_bytes
FROM stepgate.tenant_usage WHERE tenant = @tenant;

-- name: UsageFold :execrows
-- Folds the usage rows of connections that have ended (no backend of that pid now) into
-- their tenants' rows of stripe 0. A pid taken again meanwhile by a new connection is
-- harmless: the delete takes the row as committed, whoever wrote it, and the sums move
-- whole. At most max_rows rows a statement.
WITH gone AS (
    DELETE FROM stepgate.tenant_usage u
    WHERE (u.tenant, u.stripe) IN (
        SELECT o.tenant, o.stripe FROM stepgate.tenant_usage o
        WHERE o.stripe <> 0 AND NOT stepgate.backend_alive(o.stripe)
        LIMIT @max_rows FOR UPDATE SKIP LOCKED)
    RETURNING u.tenant, u.runs, u.stream_bytes, u.mailbox_bytes, u.event_bytes, u.journal_bytes
)
INSERT INTO stepgate.tenant_usage AS u (tenant, stripe, runs, stream_bytes, mailbox_bytes, event_bytes, journal_bytes)
SELECT tenant, 0, sum(runs), sum(stream_bytes), sum(mailbox_bytes), sum(event_bytes), sum(journal_bytes)
FROM gone GROUP BY tenant
ON CONFLICT (tenant, stripe) DO UPDATE SET runs = u.runs + excluded.runs,
    stream_bytes = u.stream_bytes + excluded.stream_bytes, mailbox_bytes = u.mailbox_bytes + excluded.mailbox_bytes,
    event_bytes = u.event_bytes + excluded.event_bytes, journal_bytes = u.journal_bytes + excluded.journal_bytes;
