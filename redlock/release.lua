-- release.lua: end (or shorten) each lease its token holds on this node,
-- after redisstore's release.lua, and say whether waiters should look.
--
-- ARGV[1] release channel (redisstore's Prefix .. 'released')
-- Per item i (one or more):
-- KEYS[2i-1] lock key, KEYS[2i] its fence counter
-- ARGV[4i-2] token, ARGV[4i-1] KeepFor in ms (0: delete),
-- ARGV[4i] flags: 1 publish the deletion, 2 roll the counter back,
-- ARGV[4i+1] the user's key
--
-- An item's result is 1 when released or shortened, 0 when the token does
-- not hold the key; the script returns the array of them, in order.
--
-- A deletion published is '}' .. token .. ':' .. key: no user key starts
-- with '}' and no token holds ':', so subscribers tell it from
-- redisstore's plain key, and count the nodes that released one lease
-- (see notify.go).
--
-- Rolling back takes back the INCR of a grant that never became a lock (a
-- give-back of a vote that failed): the counter goes down by one when it
-- still is the fence this lease was given, so nothing counted from it
-- since. See the package documentation, "Fences".
local out = {}
for i = 1, #KEYS / 2 do
  local lk, fk = KEYS[2 * i - 1], KEYS[2 * i]
  local t, keep, flags = ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
  local v = redis.call('GET', lk)
  if not v or string.find(v, ':', 1, true) ~= #t + 1 or string.sub(v, 1, #t) ~= t then
    out[i] = 0
  elseif keep > 0 then
    redis.call('PEXPIRE', lk, keep)
    out[i] = 1
  else
    redis.call('DEL', lk)
    if flags >= 2 and redis.call('GET', fk) == string.match(v, '^[^:]*:(%d+):') then
      redis.call('DECR', fk)
    end
    if flags % 2 == 1 then
      redis.call('PUBLISH', ARGV[1], '}' .. t .. ':' .. ARGV[4 * i + 1])
    end
    out[i] = 1
  end
end
return out
