-- renew.lua: extend every lease in a batch whose token still holds it,
-- after kinds.lua. All keys of one call are in one hash slot on a Cluster.
--
-- ARGV[1] m, the number of mutex leases, which come first
-- ARGV[2] the release channel (for entries pruned on the way)
-- Mutex lease i (1..m):
--   KEYS[i]                lock key
--   ARGV[2i+1], ARGV[2i+2] token, new TTL in ms
-- Hold j of a read-write lock or semaphore, after them:
--   KEYS[m+3j-2..m+3j]     its h, held and wait (kinds.lua)
--   ARGV[2m+4j-1..2m+4j+2] token, new TTL in ms, mode ('r', 'w' or 'p'),
--                          the user's key
--
-- A lease's result is 1 when renewed, 0 when not held by that token. With
-- one lease the script returns its result; with more, the array of them, in
-- that order.
local function results(out)
  if #out == 1 then
    return out[1]
  end
  return out
end

local m = tonumber(ARGV[1])
local out = {}
for i = 1, m do
  local t = ARGV[2 * i + 1]
  local v = redis.call('GET', KEYS[i])
  -- The stored token is everything before the first ':'; it must equal t.
  if v and string.find(v, ':', 1, true) == #t + 1 and string.sub(v, 1, #t) == t then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 2])
    out[i] = 1
  else
    out[i] = 0
  end
end
if #KEYS == m then
  return results(out)
end
local now = nowMs()
-- Prune and settle each key once, however many of its holds are renewed.
local keys, order = {}, {}
for j = 1, (#KEYS - m) / 3 do
  local k = kindsOf(m + 3 * j - 2)
  local a = 2 * m + 4 * j - 2
  if not keys[k.h] then
    keys[k.h] = k
    order[#order + 1] = k
    k.pruned = prune(k, now)
    k.user = ARGV[a + 4]
  end
  out[m + j] = renewKind(k, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], now)
end
for _, k in ipairs(order) do
  settleKinds(k)
  if k.pruned > 0 then
    redis.call('PUBLISH', ARGV[2], k.user)
  end
end
return results(out)
