-- acquire.lua: grant each key to a token when nobody holds it.
--
-- Per item i (one or more; in a Cluster all in one hash slot):
-- KEYS[2i-1] lock key, KEYS[2i] fence counter (same hash slot)
-- ARGV[3i-2] token (no ':'), ARGV[3i-1] TTL in ms, ARGV[3i] owner name
--
-- An item's result is the fence (an integer) when granted (or already
-- granted to this token), {value, pttl} when held by another token. With
-- one item the script returns its result; with more, the array of them, in
-- order, so a key named twice goes to its first item.
-- The lease value is token .. ':' .. fence .. ':' .. owner.
-- GET then SET PX is the script form of SET NX PX: a script runs atomically,
-- and unlike SET NX it gives the holder's value and PTTL in the same call.
local function acquire(lk, fk, t, ttl, owner)
  local v = redis.call('GET', lk)
  if v and string.find(v, ':', 1, true) == #t + 1 and string.sub(v, 1, #t) == t then
    -- Our own grant: this is a retry of a request whose reply was lost.
    -- Tokens are unique per grant, so return the same grant; its expiry
    -- still runs from the first execution, which is later than the time
    -- the caller counts its lease from.
    return tonumber(string.match(v, '^[^:]*:(%d+):'))
  end
  if v then
    return {v, redis.call('PTTL', lk)}
  end
  local fence = redis.call('INCR', fk)
  -- '%d', not '..': Lua 5.1 formats numbers with %.14g, which would turn
  -- a fence above 1e14 into exponent notation.
  redis.call('SET', lk, t .. ':' .. string.format('%d', fence) .. ':' .. owner, 'PX', ttl)
  return fence
end

if #KEYS == 2 then
  return acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
end
local out = {}
for i = 1, #KEYS / 2 do
  out[i] = acquire(KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i])
end
return out
