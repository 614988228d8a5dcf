-- acquire.lua: grant KEYS[1] to a token when nobody holds it.
--
-- KEYS[1] lock key, KEYS[2] fence counter (same hash slot)
-- ARGV[1] token (hex, no ':'), ARGV[2] TTL in ms, ARGV[3] owner name
--
-- Returns the fence (an integer) when granted (or already granted to this
-- token), {value, pttl} when held by another token.
-- The lease value is token .. ':' .. fence .. ':' .. owner.
-- GET then SET PX is the script form of SET NX PX: a script runs atomically,
-- and unlike SET NX it gives the holder's value and PTTL in the same call.
local t = ARGV[1]
local v = redis.call('GET', KEYS[1])
if v and string.find(v, ':', 1, true) == #t + 1 and string.sub(v, 1, #t) == t then
  -- Our own grant: this is a retry of a request whose reply was lost.
  -- Tokens are unique per grant, so return the same grant; its expiry
  -- still runs from the first execution, which is later than the time the
  -- caller counts its lease from.
  return tonumber(string.match(v, '^[^:]*:(%d+):'))
end
if v then
  return {v, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
-- '%d', not '..': Lua 5.1 formats numbers with %.14g, which would turn a
-- fence above 1e14 into exponent notation.
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', fence) .. ':' .. ARGV[3], 'PX', ARGV[2])
return fence
