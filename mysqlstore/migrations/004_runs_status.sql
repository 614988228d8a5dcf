-- Every scheduler looks for running records (driver.RunRunning) every few
-- seconds to settle those of dead nodes; they are few in a long history.
-- This key reads one status's records in the listing order. (A key that
-- exists already, from a run of this migration cut short before it was
-- recorded, is taken as made.)
ALTER TABLE {{table_runs}} ADD KEY by_status (status, rev_tick, job, trigger_id, rev_attempt);
