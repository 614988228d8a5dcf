-- ledger_stats.lua: on a Cluster, apply to the per-minute rollups the
-- changes of a RecordRuns batch, which ledger_record.lua returned (its
-- keys are in other hash slots). After ledger_rollup.lua.
--
-- KEYS[k]      one hour's rollup hash; every key has the hash tag {stats}
-- ARGV[1]      seconds to keep a rollup hash after its last write
-- ARGV[3*i-1]  change i: where its record counts (rollup's x),
-- ARGV[3*i]    the status it had ('' for none),
-- ARGV[3*i+1]  and the status written.
--
-- Returns the number of changes.
local d = {}
for i = 2, #ARGV, 3 do
  rollup(d, tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2])
end
flush(d, ARGV[1])
return (#ARGV - 1) / 3
