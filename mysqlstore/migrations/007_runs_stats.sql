-- ledger.Stats: RunStats groups the records of a tick range by status and
-- lateness; by_stats covers that query, so it reads the range from the
-- index alone, never the rest of the history. A run cut short before it
-- was recorded runs again: "Duplicate key name" is taken as made.
ALTER TABLE {{table_runs}}
  ADD KEY by_stats (rev_tick, status, attempt, tick, started_at);
