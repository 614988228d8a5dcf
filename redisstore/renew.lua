-- renew.lua: extend every lease in a batch whose token still holds it.
--
-- KEYS[i]        lock key i (all in one hash slot on a Cluster)
-- ARGV[2*i-1]    token i
-- ARGV[2*i]      new TTL i in ms
--
-- Returns one integer per key: 1 renewed, 0 not held by that token.
local out = {}
for i = 1, #KEYS do
  local t = ARGV[2 * i - 1]
  local v = redis.call('GET', KEYS[i])
  -- The stored token is everything before the first ':'; it must equal t.
  if v and string.find(v, ':', 1, true) == #t + 1 and string.sub(v, 1, #t) == t then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
