-- Job registration (driver.JobRegister): the schedule the fleet runs a job
-- with, and since when its ticks are owed by the registering node's clock;
-- both NULL while the job is not registered. A jobs row may now exist for a
-- job that was never paused (paused false).
ALTER TABLE {{.Qualified "_jobs"}} ADD COLUMN spec text, ADD COLUMN since timestamptz;
-- JobStates reads only the paused rows, however many jobs are registered.
CREATE INDEX {{.Ident "_jobs_paused"}} ON {{.Qualified "_jobs"}} (job) WHERE paused;
