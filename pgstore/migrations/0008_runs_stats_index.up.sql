-- ledger.Stats: RunStats groups the records of a tick range by status and
-- lateness; this index covers that query (an index-only scan of the range,
-- never the rest of the history).
CREATE INDEX {{.Ident "_runs_stats"}} ON {{.Qualified "_runs"}} (tick, status, attempt, started_at);
