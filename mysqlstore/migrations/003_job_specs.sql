-- Job registration (driver.JobRegister): the schedule the fleet runs a job
-- with (bytes, compared as Go compares strings), and since when its ticks
-- are owed, in UTC by the registering node's clock. A table of its own, so
-- that JobStates, which reads only the paused jobs and the triggers, does
-- not grow with the registered jobs, and so that running this migration
-- again changes nothing.
CREATE TABLE IF NOT EXISTS {{table_specs}} (
  job   VARBINARY(512)  NOT NULL,
  spec  VARBINARY(1024) NOT NULL,
  since DATETIME(6)     NOT NULL,
  PRIMARY KEY (job)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
