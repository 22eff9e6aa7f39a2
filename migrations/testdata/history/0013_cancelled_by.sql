-- cancelled_by is the identity of whoever cancelled a run (never a token). A rerun's
-- own identity is whoever reran it, and rerun_of names the run it repeats.
ALTER TABLE stepgate.run ADD COLUMN cancelled_by jsonb;
