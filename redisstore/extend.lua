-- extend.lua: renew one mutex lease when its token still holds it: a lone
-- renewal (an Extend that no other Extend goes with). It checks the token
-- as renew.lua does, with the fewest arguments to send and to parse.
--
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] new TTL in ms
--
-- Returns 1 when renewed, 0 when the token does not hold the key.
local t = ARGV[1]
local v = redis.call('GET', KEYS[1])
-- The stored token is everything before the first ':'; it must equal t.
if v and string.find(v, ':', 1, true) == #t + 1 and string.sub(v, 1, #t) == t then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
