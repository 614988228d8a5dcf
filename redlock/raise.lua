-- raise.lua: raise a fence counter to at least a value, never lower it.
--
-- KEYS[1] fence counter (redisstore's Prefix{K}:fence)
-- ARGV[1] the fence of a grant this node took part in
--
-- Returns 1 when the counter was raised, 0 when it was already there.
-- After a grant, every granting node's counter is at least the grant's fence,
-- so the next majority, which shares a node with this one, hands out a
-- higher fence (see the package documentation, "Fences").
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c >= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
