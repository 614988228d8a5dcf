-- ledger_record.lua: store a batch of run records, replacing those with the
-- same key.
--
-- KEYS[3*i-2]    record i's job's runs index: a sorted set of run members
--                scored by tick
-- KEYS[3*i-1]    its records: a hash from run member to record
-- KEYS[3*i]      its record times: a sorted set of run members scored by
--                when they were recorded
-- ARGV[2*i-1]    run member i: tick .. ':' .. attempt .. ':' .. trigger, or
--                for a shard other than 0 tick .. '/' .. shard .. ':' ..
--                attempt .. ':' .. trigger
-- ARGV[2*i]      record i without its time (see ledger.go)
--
-- Ticks and times are unix microseconds; the record time is Redis's clock
-- (TIME), put before the record as at .. ':'. All keys of one call are in
-- one hash slot on a Cluster. Returns the number of records stored.
local now = redis.call('TIME')
local at = string.format('%d', now[1] * 1000000 + now[2])
local n = #ARGV / 2
for i = 1, n do
  local m = ARGV[2 * i - 1]
  redis.call('ZADD', KEYS[3 * i - 2], string.match(m, '^(%-?%d+)[:/]'), m)
  redis.call('HSET', KEYS[3 * i - 1], m, at .. ':' .. ARGV[2 * i])
  redis.call('ZADD', KEYS[3 * i], at, m)
end
return n
