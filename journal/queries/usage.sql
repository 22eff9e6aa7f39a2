-- name: UsageOf :one
SELECT coalesce(sum(runs), 0)::bigint AS runs, coalesce(sum(stream_bytes), 0)::bigint AS stream_bytes,
    coalesce(sum(mailbox_bytes), 0)::bigint AS mailbox_bytes
FROM stepgate.tenant_usage WHERE tenant = @tenant;
