-- ledger_stats.lua: on a Cluster, apply to the per-minute rollups the
-- changes of a RecordRuns batch, which ledger_record.lua returned (its
-- keys are in other hash slots). After ledger_rollup.lua.
--
-- KEYS[k]      one hour's rollup hash; every key has the hash tag {stats}
-- ARGV[1]      seconds to keep a rollup hash after its last write
-- ARGV[5*i-3]  change i: the index in KEYS of its record's hour's hash,
-- ARGV[5*i-2]  the record's minute within the hour,
-- ARGV[5*i-1]  its lateness bucket (-1: none),
-- ARGV[5*i]    the status it had ('' for none),
-- ARGV[5*i+1]  and the status written.
--
-- Returns the number of changes.
local d = {}
for i = 2, #ARGV, 5 do
  rollup(d, tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4])
end
flush(d, ARGV[1])
return (#ARGV - 1) / 5
