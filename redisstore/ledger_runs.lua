-- ledger_runs.lua: read one job's run records, newest tick first.
--
-- KEYS[1] the job's runs index (sorted set of run members scored by tick)
-- KEYS[2] the job's records (hash from run member to record)
-- ARGV[1] the highest tick, a ZRANGEBYSCORE bound ("+inf", "123", "(123")
-- ARGV[2] the lowest tick, likewise
-- ARGV[3] the status to select, "" for any
-- ARGV[4] how many records to count before stopping, 0 for all
-- ARGV[5] a tick whose records are returned but not counted (the tick of
--         the key a listing continues after), "" for none
--
-- Returns {member, record, ...}. Within one tick the order of the members
-- is not the listing order, so the script never stops inside a tick: it
-- returns every matching record of the last tick it reached, and the
-- caller sorts and cuts.
local limit = tonumber(ARGV[4])
local uncounted = tonumber(ARGV[5])
local status = ARGV[3]
local out, counted, last, offset = {}, 0, nil, 0
local page = 256
while true do
  local ms = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', offset, page)
  if #ms == 0 then
    return out
  end
  local vs = redis.call('HMGET', KEYS[2], unpack(ms))
  for i, m in ipairs(ms) do
    local tick = tonumber(string.match(m, '^(%-?%d+)[:/]'))
    if limit > 0 and counted >= limit and tick ~= last then
      return out
    end
    local v = vs[i]
    local keep = v and true or false
    if keep and status ~= '' then
      -- The record is at .. ':' .. #status .. ':' .. status .. ...
      local n, p = string.match(v, '^%-?%d+:(%d+):()')
      keep = n ~= nil and string.sub(v, p, p + tonumber(n) - 1) == status
    end
    if keep then
      out[#out + 1] = m
      out[#out + 1] = v
      if tick ~= uncounted then
        counted = counted + 1
      end
      last = tick
    end
  end
  if #ms < page then
    return out
  end
  offset = offset + #ms
end
