-- Every scheduler looks for running records (driver.RunRunning) every few
-- seconds to settle those of dead nodes; they are few in a long history.
-- Runs writes the status as a literal for them, so this index serves it.
CREATE INDEX {{.Ident "_runs_running"}} ON {{.Qualified "_runs"}} (tick DESC, job, trigger_id, attempt DESC) WHERE status = 'running';
