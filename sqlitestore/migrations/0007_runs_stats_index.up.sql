-- ledger.Stats: RunStats groups the records of a tick range by status and
-- lateness; this index covers that query, so it reads the range from the
-- index alone (no table rows), and never the rest of the history.
CREATE INDEX IF NOT EXISTS {{.Ident "_runs_stats_idx"}} ON {{.Ident "_runs"}} (tick, status, attempt, started_at);
