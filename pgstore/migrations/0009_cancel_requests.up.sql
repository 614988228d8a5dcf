-- Cancel requests (ledger.JobCancel): a trigger request whose cancel column
-- names the run to stop, as ledger.TriggerRequest.CancelField encodes it
-- (the shard, "/" and the run's trigger ID); '' for a request to run.
-- ADD COLUMN with a constant default does not rewrite the table; the
-- existing rows are requests to run.
ALTER TABLE {{.Qualified "_triggers"}} ADD COLUMN cancel text NOT NULL DEFAULT '';
