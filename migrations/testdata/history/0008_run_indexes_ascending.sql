-- The run listing indexes in ascending order. Newest-first listings scan them backward
-- just as fast, while a new run is now inserted at the right end of its tenant's range
-- instead of the left: the descending indexes cost about 30 buffer accesses and
-- frequent page splits per run created, these about 3.
DROP INDEX stepgate.run_by_created;
DROP INDEX stepgate.run_by_function;
CREATE INDEX run_by_created ON stepgate.run (tenant, created_at, id);
CREATE INDEX run_by_function ON stepgate.run (tenant, function, created_at, id);
