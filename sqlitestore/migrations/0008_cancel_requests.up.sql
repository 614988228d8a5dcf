-- Cancel requests (ledger.JobCancel): a row of the trigger requests whose
-- cancel column names the run to stop, as ledger.TriggerRequest.CancelField
-- encodes it (the shard, "/" and the run's trigger ID); NULL for a request
-- to run. Existing rows are requests to run.
ALTER TABLE {{.Ident "_triggers"}} ADD COLUMN cancel TEXT;
