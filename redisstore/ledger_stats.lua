-- ledger_stats.lua: add a batch of run records to the per-minute rollups
-- (stats.go), one call per RecordRuns batch.
--
-- KEYS[k]      one hour's rollup hash; every key has the hash tag {stats}
-- ARGV[1]      seconds to keep a rollup hash after its last write
-- ARGV[3*i-1]  the index in KEYS of increment i's hash
-- ARGV[3*i]    its field: minute .. ':' .. status, or minute .. ':L' ..
--              lateness bucket
-- ARGV[3*i+1]  the increment
--
-- The caller adds up the batch first, so a batch of records of one minute
-- is a few increments whatever its size. Returns the number of increments.
for i = 2, #ARGV, 3 do
  redis.call('HINCRBY', KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2])
end
for k = 1, #KEYS do
  redis.call('EXPIRE', KEYS[k], ARGV[1])
end
return (#ARGV - 1) / 3
