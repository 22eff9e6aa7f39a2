-- name: CreateJournalPartitions :one
-- stepgate.create_journal_partitions: how many partitions it made.
SELECT stepgate.create_journal_partitions(sqlc.arg(at)::timestamptz, sqlc.arg(ahead)::int)::int AS made;
