-- journal_bytes bounds a run's journal: each entry holds the bytes of the run's entries up
-- to and including itself (outputs and errors), so a new entry's total is its
-- predecessor's plus its own, found with the same primary key probe that checks the
-- journal has no gap. Entries written before this migration have none (read as 0).
ALTER TABLE stepgate.journal_entry ADD COLUMN journal_bytes bigint;
