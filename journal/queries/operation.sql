-- name: OperationCreate :one
-- Finds nothing when the tenant has an operation running.
INSERT INTO stepgate.operation (id, tenant, kind, filter, options, by_identity)
VALUES (@id, @tenant, @kind, @filter, sqlc.narg(options), @by_identity)
ON CONFLICT (tenant) WHERE status = 'running' DO NOTHING
RETURNING *;

-- name: OperationRunningID :one
SELECT id::text FROM stepgate.operation WHERE tenant = @tenant AND status = 'running';

-- name: OperationGet :one
SELECT * FROM stepgate.operation WHERE id = @id AND tenant = @tenant;

-- name: OperationGetByID :one
SELECT * FROM stepgate.operation WHERE id = @id;

-- name: OperationCountMatching :one
-- Counts the runs of the operation's filter created before it (the conditions on r are
-- OperationBatch's); finds nothing when the matched count is set already.
UPDATE stepgate.operation SET matched = (
    SELECT count(*) FROM stepgate.run r
    WHERE r.tenant = @tenant AND r.created_at <= @before
        AND (sqlc.narg(function)::text IS NULL OR r.function = sqlc.narg(function))
        AND (sqlc.narg(created_after)::timestamptz IS NULL OR r.created_at > sqlc.narg(created_after))
        AND (sqlc.narg(prefix)::text IS NULL OR starts_with(r.idempotency_key, sqlc.narg(prefix)))
        AND r.status = ANY (@statuses::text[]))
WHERE operation.id = @op AND matched IS NULL
RETURNING matched;

-- name: OperationBatch :many
-- Locks the next batch of the runs of the operation's filter created before it (the
-- conditions on r are OperationCountMatching's) past (after_t, after_id), oldest first.
SELECT r.id::text AS id, r.created_at FROM stepgate.run r
WHERE r.tenant = @tenant AND r.created_at <= @before
    AND (sqlc.narg(function)::text IS NULL OR r.function = sqlc.narg(function))
    AND (sqlc.narg(created_after)::timestamptz IS NULL OR r.created_at > sqlc.narg(created_after))
    AND (sqlc.narg(prefix)::text IS NULL OR starts_with(r.idempotency_key, sqlc.narg(prefix)))
    AND r.status = ANY (@statuses::text[])
    AND (sqlc.narg(after_t)::timestamptz IS NULL OR (r.created_at, r.id) > (sqlc.narg(after_t), sqlc.narg(after_id)::uuid))
ORDER BY r.created_at, r.id
LIMIT @max_runs
FOR UPDATE;

-- name: OperationCancelBatch :many
-- Cancels the batch's runs that have not finished, like CancelRun, and counts them in
-- the operation. stepgate_run_done is journal.NotifyChannel.
WITH u AS (
    UPDATE stepgate.run r SET status = 'cancelled', error = @error, lease_until = NULL,
        wake_at = NULL, awaiting = NULL, finished_at = now(), cancelled_by = @cancelled_by
    WHERE r.id = ANY (@ids::uuid[]) AND r.tenant = @tenant
        AND r.status IN ('scheduled', 'queued', 'running', 'suspended')
    RETURNING r.id, r.tenant, r.parent_id, r.parent_seq, r.created_at, r.notify
), waits AS (
    DELETE FROM stepgate.run_wait w USING u WHERE w.tenant = u.tenant AND w.run_id = u.id
), notified AS (
    SELECT pg_notify('stepgate_run_done', id::text) FROM u WHERE notify
), counted AS (
    UPDATE stepgate.operation SET cancelled = cancelled + (SELECT count(*) FROM u), batches = batches + 1
    WHERE operation.id = @op
)
SELECT u.id::text AS id, u.parent_id, u.parent_seq, u.created_at
FROM u, (SELECT count(*) FROM notified) notified_count;

-- name: OperationFinish :one
-- Completes the running operation, or fails it when error_message is not empty.
UPDATE stepgate.operation SET status = CASE WHEN sqlc.arg(error_message)::text = '' THEN 'completed' ELSE 'failed' END,
    error = nullif(sqlc.arg(error_message), ''), finished_at = now()
WHERE id = @id AND status = 'running'
RETURNING *;

-- name: OperationLock :one
-- Locks the operation for a batch: a cancel (OperationCancel) waits for the batch to commit,
-- and the batch sees the operation's status and counts as they are.
SELECT * FROM stepgate.operation WHERE id = @id FOR NO KEY UPDATE;

-- name: OperationCancel :one
-- Cancels the tenant's running operation; finds nothing when it is not running (or not
-- the tenant's).
UPDATE stepgate.operation SET status = 'cancelled', finished_at = now(), cancelled_by = @cancelled_by
WHERE id = @id AND tenant = @tenant AND status = 'running'
RETURNING *;

-- name: OperationRerunCountMatching :one
-- Counts the finished runs of a rerun's filter created before it (the conditions on r are
-- OperationRerunBatch's, but the runs already taken); finds nothing when the matched count
-- is set already.
UPDATE stepgate.operation SET matched = (
    SELECT count(*) FROM stepgate.run r
    WHERE r.tenant = @tenant AND r.created_at <= @before
        AND (sqlc.narg(function)::text IS NULL OR r.function = sqlc.narg(function))
        AND (sqlc.narg(created_after)::timestamptz IS NULL OR r.created_at > sqlc.narg(created_after))
        AND (sqlc.narg(prefix)::text IS NULL OR starts_with(r.idempotency_key, sqlc.narg(prefix)))
        AND r.status = ANY (@statuses::text[])
        AND (sqlc.narg(error_type)::text IS NULL OR r.error->>'type' = sqlc.narg(error_type))
        AND (sqlc.narg(error_group)::text IS NULL
            OR (r.status = 'failed' AND stepgate.error_group(r.function, r.error) = sqlc.narg(error_group))))
WHERE operation.id = @op AND matched IS NULL
RETURNING matched;

-- name: OperationRerunBatch :many
-- The next batch of the finished runs of a rerun's filter created before it (the conditions
-- on r are OperationRerunCountMatching's) past (after_t, after_id), the position the
-- operation reached (OperationRerunRecord), oldest first. failure_seq, with from_failure, is
-- the seq of the run's last entry that holds an error, 0 when none does. A finished run never changes, so
-- nothing is locked.
SELECT r.id::text AS id, r.created_at, r.function, r.input,
    coalesce(CASE WHEN @from_failure::boolean THEN (
        SELECT max(e.seq) FROM stepgate.journal_entry e
        WHERE e.tenant = r.tenant AND e.run_id = r.id AND e.error IS NOT NULL) END, 0)::integer AS failure_seq
FROM stepgate.run r
WHERE r.tenant = @tenant AND r.created_at <= @before
    AND (sqlc.narg(function)::text IS NULL OR r.function = sqlc.narg(function))
    AND (sqlc.narg(created_after)::timestamptz IS NULL OR r.created_at > sqlc.narg(created_after))
    AND (sqlc.narg(prefix)::text IS NULL OR starts_with(r.idempotency_key, sqlc.narg(prefix)))
    AND r.status = ANY (@statuses::text[])
    AND (sqlc.narg(error_type)::text IS NULL OR r.error->>'type' = sqlc.narg(error_type))
    AND (sqlc.narg(error_group)::text IS NULL
        OR (r.status = 'failed' AND stepgate.error_group(r.function, r.error) = sqlc.narg(error_group)))
    AND (sqlc.narg(after_t)::timestamptz IS NULL OR (r.created_at, r.id) > (sqlc.narg(after_t), sqlc.narg(after_id)::uuid))
ORDER BY r.created_at, r.id
LIMIT @max_runs;

-- name: OperationRerunRecord :one
-- Records a batch of a rerun: the runs it reran (done_runs, new_runs) and those it could
-- not (failed_runs, failed_errors), adds them to the operation's counts, and appends sample
-- (a JSON array of {run_id, error}) to its errors, and moves its position to (after_t,
-- after_id).
WITH done AS (
    INSERT INTO stepgate.operation_run (tenant, operation_id, run_id, new_run_id)
    SELECT @tenant, @op, d.run_id, d.new_run_id
    FROM ROWS FROM (unnest(@done_runs::uuid[]), unnest(@new_runs::uuid[])) AS d (run_id, new_run_id)
), failed AS (
    INSERT INTO stepgate.operation_run (tenant, operation_id, run_id, error)
    SELECT @tenant, @op, f.run_id, f.error
    FROM ROWS FROM (unnest(@failed_runs::uuid[]), unnest(@failed_errors::text[])) AS f (run_id, error)
)
UPDATE stepgate.operation SET cancelled = cancelled + cardinality(@done_runs::uuid[]),
    failed = failed + cardinality(@failed_runs::uuid[]), errors = errors || @sample::jsonb,
    batches = batches + 1, after_created_at = @after_t, after_id = @after_id
WHERE operation.id = @op
RETURNING *;
