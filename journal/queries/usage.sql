-- name: UsageOf :one
SELECT coalesce(sum(runs), 0)::bigint AS runs, coalesce(sum(stream_bytes), 0)::bigint AS stream_bytes,
    coalesce(sum(mailbox_bytes), 0)::bigint AS mailbox_bytes, coalesce(sum(event_bytes), 0)::bigint AS event_bytes,
    coalesce(sum(journal_bytes), 0)::bigint AS journal_bytes
FROM stepgate.tenant_usage WHERE tenant = @tenant;
