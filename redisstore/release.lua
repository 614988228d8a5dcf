-- release.lua: end (or shorten) a lease if the token holds it.
--
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] KeepFor in ms (0: delete),
-- ARGV[3] release channel, ARGV[4] the user's key (the message payload)
--
-- Returns 1 when released or shortened, 0 when the token does not hold it.
local t = ARGV[1]
local v = redis.call('GET', KEYS[1])
-- The stored token is everything before the first ':'; it must equal t.
if not v or string.find(v, ':', 1, true) ~= #t + 1 or string.sub(v, 1, #t) ~= t then
  return 0
end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
