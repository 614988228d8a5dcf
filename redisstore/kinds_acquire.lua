-- kinds_acquire.lua: one attempt at a hold of a read-write lock or a
-- semaphore (driver.Mode's rules), after kinds.lua.
--
-- KEYS[1..3] the key's h, held and wait (kinds.lua), KEYS[4] its fence
-- counter, all in one hash slot.
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] owner name, ARGV[4] mode ('r',
-- 'w' or 'p'), ARGV[5] limit (permits, 0 for 'r' and 'w'), ARGV[6] the
-- release channel, ARGV[7] the user's key (the message payload).
--
-- Returns {1, fence} when granted (or already held by this token in this
-- mode: renewed), {0, owner, ms left} when refused (ms 0: a waiting
-- writer), {2, limit} when the key is live with another limit. Entries
-- pruned on the way are announced on the channel.
local k = kindsOf(1)
local t, ttl, owner, mode, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = nowMs()
local pruned = prune(k, now)

local function done(r)
  settleKinds(k)
  if pruned > 0 then
    redis.call('PUBLISH', ARGV[6], ARGV[7])
  end
  return r
end

if redis.call('ZCARD', k.held) + redis.call('ZCARD', k.wait) == 0 then
  redis.call('HSET', k.h, ':limit', limit)
else
  local cur = tonumber(redis.call('HGET', k.h, ':limit') or 0)
  if cur ~= limit then
    return done({2, cur})
  end
end

local exp = ms(now + ttl)
local v = redis.call('HGET', k.h, t)
local m = v and string.sub(v, 1, 1)
if m == mode then
  -- Our own hold: a retry of a request whose reply was lost.
  redis.call('ZADD', k.held, exp, t)
  return done({1, fenceOf(v)})
end
if v and not (m == 'c' and mode == 'w') then
  return done(redis.error_reply('token holds a hold of mode ' .. m))
end

local function grant(fence)
  redis.call('HSET', k.h, t, mode .. ':' .. ms(fence) .. ':' .. owner)
  redis.call('ZADD', k.held, exp, t)
  return done({1, fence})
end

local w = redis.call('HGET', k.h, ':w')
if mode == 'r' then
  if w then
    return done(heldBy(k, w, now))
  end
  local c = redis.call('ZRANGE', k.wait, 0, 0)[1]
  if c then
    return done({0, ownerOf(redis.call('HGET', k.h, c)), 0})
  end
  return grant(tonumber(redis.call('GET', KEYS[4]) or 0))
elseif mode == 'w' then
  if redis.call('ZCARD', k.held) == 0 then
    redis.call('ZREM', k.wait, t)
    redis.call('HSET', k.h, ':w', t)
    return grant(redis.call('INCR', KEYS[4]))
  end
  -- Refused: claim the key, so that new readers wait behind this writer.
  if not v then
    redis.call('HSET', k.h, t, 'c:0:' .. owner)
  end
  redis.call('ZADD', k.wait, exp, t)
  return done(heldBy(k, w or redis.call('ZRANGE', k.held, 0, 0)[1], now))
end
if redis.call('ZCARD', k.held) < limit then
  return grant(redis.call('INCR', KEYS[4]))
end
return done(heldBy(k, redis.call('ZRANGE', k.held, 0, 0)[1], now))
