-- name: RunJobs :many
-- The tenant, priority and deadline of each of the runs, any tenant's that db sees, for
-- the River jobs that invoke them, and the database clock. A run not found has no row.
SELECT r.id, r.tenant, r.priority, r.deadline, now()::timestamptz AS now
FROM stepgate.run r
WHERE r.id = ANY(@ids::uuid[]);
