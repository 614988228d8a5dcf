-- Cancel requests (ledger.JobCancel): a trigger request whose cancel column
-- names the run to stop, as ledger.TriggerRequest.CancelField encodes it
-- (the shard, "/" and the run's trigger ID, at most 128 bytes); '' for a
-- request to run, which the existing rows are. Run again after a cut, the
-- ALTER fails with "Duplicate column name", which Migrate takes as made.
ALTER TABLE {{table_triggers}}
  ADD COLUMN cancel VARBINARY(140) NOT NULL DEFAULT '';
