-- kinds_release.lua: end (or shorten) token's hold of a read-write lock
-- or a semaphore, after kinds.lua.
--
-- KEYS[1..3] the key's h, held and wait (kinds.lua).
-- ARGV[1] token, ARGV[2] KeepFor in ms (0: delete), ARGV[3] mode ('r', 'w'
-- or 'p'), ARGV[4] the release channel, ARGV[5] the user's key.
--
-- Returns 1 when the token's hold of that mode was released or shortened,
-- else 0. A writer's waiting claim is deleted too (mode 'w'), and then the
-- result is 0. Every deleted entry is announced on the channel.
local k = kindsOf(1)
local t, keep, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = nowMs()
local wake = prune(k, now) > 0
local v = redis.call('HGET', k.h, t)
local m = v and string.sub(v, 1, 1)
local r = 0
if m == 'c' and mode == 'w' then
  redis.call('HDEL', k.h, t)
  redis.call('ZREM', k.wait, t)
  wake = true
elseif m == mode and redis.call('ZSCORE', k.held, t) then
  r = 1
  if keep > 0 then
    redis.call('ZADD', k.held, ms(now + keep), t)
  else
    redis.call('HDEL', k.h, t)
    redis.call('ZREM', k.held, t)
    if mode == 'w' then
      redis.call('HDEL', k.h, ':w')
    end
    wake = true
  end
end
settleKinds(k)
if wake then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return r
