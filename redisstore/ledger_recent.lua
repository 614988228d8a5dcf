-- ledger_recent.lua: the statuses of one job's newest run records.
--
-- KEYS[1] the job's runs index (sorted set of run members scored by tick)
-- KEYS[2] the job's records (hash from run member to record)
-- ARGV[1] how many records
--
-- Returns {member, status, ...}: the members of the ARGV[1] highest
-- scores and every other member of the lowest tick among them (within a
-- tick the index's order is not the listing order; the caller sorts and
-- cuts).
local n = tonumber(ARGV[1])
local ms = redis.call('ZREVRANGE', KEYS[1], 0, n - 1)
if #ms == 0 then
  return {}
end
local members, seen = {}, {}
for i, m in ipairs(ms) do
  members[i] = m
  seen[m] = true
end
if #ms == n then
  -- The tick is the member's start, as ledger_record.lua scores it.
  local last = string.match(ms[#ms], '^(%-?%d+)[:/]')
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], last, last)) do
    if not seen[m] then
      members[#members + 1] = m
    end
  end
end
local vs = redis.call('HMGET', KEYS[2], unpack(members))
local out = {}
for i, m in ipairs(members) do
  local v = vs[i]
  if v then
    -- The record is at .. ':' .. #status .. ':' .. status .. ...
    local l, p = string.match(v, '^%-?%d+:(%d+):()')
    if l then
      out[#out + 1] = m
      out[#out + 1] = string.sub(v, p, p + tonumber(l) - 1)
    end
  end
end
return out
