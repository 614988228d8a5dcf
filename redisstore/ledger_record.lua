-- ledger_record.lua: store a batch of run records, replacing those with the
-- same key, and keep the per-minute rollups. After ledger_rollup.lua.
--
-- KEYS[3*i-2]    record i's job's runs index: a sorted set of run members
--                scored by tick
-- KEYS[3*i-1]    its records: a hash from run member to record
-- KEYS[3*i]      its record times: a sorted set of run members scored by
--                when they were recorded
-- KEYS[3*n+j]    rollup hashes (stats.go), when this call keeps them
-- ARGV[1]        seconds to keep a rollup hash after its last write
-- ARGV[3*i-1]    run member i: tick .. ':' .. attempt .. ':' .. trigger, or
--                for a shard other than 0 tick .. '/' .. shard .. ':' ..
--                attempt .. ':' .. trigger
-- ARGV[3*i]      record i without its time (see ledger.go): its first
--                field is its status, length .. ':' .. status
-- ARGV[3*i+1]    where it counts in the rollups (ledger_rollup.lua's x), or
--                0 when the rollup hashes are in another hash slot (a
--                Cluster): then the call returns what ledger_stats.lua is
--                to apply
--
-- Ticks and times are unix microseconds; the record time is Redis's clock
-- (TIME), put before the record as at .. ':'. All keys of one call are in
-- one hash slot on a Cluster. Returns, for each record whose write changed
-- its status and whose rollup hash is not a key of the call, i and the
-- status it had ('' for none).
local function status(v, from)
  local n, at = string.match(v, '^(%d+):()', from)
  if not n then
    return ''
  end
  return string.sub(v, at, at + tonumber(n) - 1)
end

local now = redis.call('TIME')
local at = string.format('%d', now[1] * 1000000 + now[2])
local n = (#ARGV - 1) / 3
local d, out = {}, {}
for i = 1, n do
  local m, body, x = ARGV[3 * i - 1], ARGV[3 * i], tonumber(ARGV[3 * i + 1])
  local recs, v = KEYS[3 * i - 1], at .. ':' .. body
  local was = ''
  -- A new record (the common case) is one HSETNX; the runs index gets its
  -- member then, and only then: a record that is there has its member
  -- there, with the same score (its tick), as every record is written with
  -- it and pruned with it.
  if redis.call('HSETNX', recs, m, v) == 1 then
    redis.call('ZADD', KEYS[3 * i - 2], string.match(m, '^(%-?%d+)[:/]'), m)
  else
    local prev = redis.call('HGET', recs, m)
    was = status(prev, string.match(prev, '^%d+:()'))
    redis.call('HSET', recs, m, v)
  end
  local st = status(body, 1)
  if x > 0 then
    rollup(d, x, was, st)
  elseif was ~= st then
    out[#out + 1] = i
    out[#out + 1] = was
  end
  redis.call('ZADD', KEYS[3 * i], at, m)
end
flush(d, ARGV[1])
return out
