-- Job registration (driver.JobRegister): the schedule the fleet runs a job
-- with and since when its ticks are owed, in unix microseconds by the
-- registering node's clock; both NULL while the job is not registered. A
-- jobs row may now exist for a job that was never paused (paused 0).
ALTER TABLE {{.Ident "_jobs"}} ADD COLUMN spec TEXT;
ALTER TABLE {{.Ident "_jobs"}} ADD COLUMN since INTEGER;
-- JobStates reads only the paused rows, however many jobs are registered.
CREATE INDEX IF NOT EXISTS {{.Ident "_jobs_paused_idx"}} ON {{.Ident "_jobs"}} (job) WHERE paused = 1;
