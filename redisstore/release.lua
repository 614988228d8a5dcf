-- release.lua: end (or shorten) each lease its token holds.
--
-- Per item i (one or more; in a Cluster all in one hash slot):
-- KEYS[i] lock key
-- ARGV[4i-3] token, ARGV[4i-2] KeepFor in ms (0: delete),
-- ARGV[4i-1] release channel, ARGV[4i] the user's key (the message payload)
--
-- An item's result is 1 when released or shortened, 0 when the token does
-- not hold the key. With one item the script returns its result; with
-- more, the array of them, in order.
local function release(lk, t, keep, channel, key)
  local v = redis.call('GET', lk)
  -- The stored token is everything before the first ':'; it must equal t.
  if not v or string.find(v, ':', 1, true) ~= #t + 1 or string.sub(v, 1, #t) ~= t then
    return 0
  end
  if tonumber(keep) > 0 then
    redis.call('PEXPIRE', lk, keep)
    return 1
  end
  redis.call('DEL', lk)
  redis.call('PUBLISH', channel, key)
  return 1
end

if #KEYS == 1 then
  return release(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
end
local out = {}
for i = 1, #KEYS do
  out[i] = release(KEYS[i], ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i])
end
return out
