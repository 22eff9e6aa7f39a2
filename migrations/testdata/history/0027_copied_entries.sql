-- A rerun from a step (POST /v1/runs/{id}/rerun with from_seq N) starts its journal with
-- copies of the rerun run's entries before N; copied_from names that run on each copy, so
-- the API and the dashboard can tell a replayed copy from a step this run executed.
-- Entries this run journals itself have none.
ALTER TABLE stepgate.journal_entry ADD COLUMN copied_from uuid;
