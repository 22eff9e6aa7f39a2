-- The invoker sets the tenant (args "tenant") and the priority of every stepgate.invoke
-- job it inserts, from the run at hand or from the run's row read by id in the job's own
-- transaction (journal.RunJobs), so no trigger on River's table fills them in any more:
-- every insert into river_job is River's, as River wrote it, and what a job carries can
-- be seen at the place that inserts it. Jobs already queued keep what they carry.
DROP TRIGGER invoke_job_of_run ON river_job;
DROP FUNCTION stepgate.invoke_job_of_run();
