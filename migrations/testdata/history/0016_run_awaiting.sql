-- What a suspended run waits for, as the invoker's answer said (journal.Awaiting): a
-- sleep, a step's retry or a child run, with the seq it resumes at. Readers (the API, the
-- dashboard) show it as it is instead of guessing it from the journal. NULL when the run
-- does not wait for anything.
ALTER TABLE stepgate.run ADD COLUMN awaiting jsonb;
