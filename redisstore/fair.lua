-- fair.lua: a fair (first come, first served) queue of waiters for a
-- mutex, after kinds.lua.
--
-- KEYS[1] lock key, KEYS[2] its fence counter (as acquire.lua), KEYS[3]
-- the queue: a sorted set of tokens by arrival, KEYS[4] its leases: a
-- sorted set of the same tokens by expiry (unix ms by Redis's clock). Both
-- expire with their last entry.
-- ARGV[1] 'enqueue', 'wait' or 'leave'; ARGV[2] token; ARGV[3] TTL in ms
-- (of the entry, and of the lease when granted); ARGV[4] owner name;
-- ARGV[5] release channel; ARGV[6] the user's key (the message payload).
--
-- Every call first drops the entries whose lease ended: a dead waiter
-- leaves the queue within its TTL. 'enqueue' adds the token at the back
-- (once), 'wait' renews its entry; then both grant the key, exactly as
-- acquire.lua does, when the entry is the head of the queue and the key is
-- free, removing the entry. They return {1, fence} when granted (now or by
-- an earlier call whose reply was lost), {0, holder's value or '', ms
-- until that may change} while waiting, and ('wait') {2} when the entry is
-- gone. 'leave' removes the entry, or releases the key if it was granted,
-- and returns 1, or 0 when there was neither.
-- Whenever the head of the queue may have gone, the user's key is
-- published, so that the next waiter looks.
local lk, fk, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, t, ttl = ARGV[1], ARGV[2], ARGV[3]
local now = nowMs()
local wake = false
local gone = redis.call('ZRANGEBYSCORE', qx, '-inf', now)
if #gone > 0 then
  zdrop(q, nil, gone)
  redis.call('ZREMRANGEBYSCORE', qx, '-inf', now)
  wake = true
end

local function done(r)
  settle({q, qx}, {qx})
  if wake then
    redis.call('PUBLISH', ARGV[5], ARGV[6])
  end
  return r
end

local v = redis.call('GET', lk)
-- The stored token is everything before the first ':'.
local mine = v and string.find(v, ':', 1, true) == #t + 1 and string.sub(v, 1, #t) == t
if op == 'leave' then
  if redis.call('ZRANK', q, t) == 0 then
    wake = true
  end
  local r = redis.call('ZREM', q, t)
  redis.call('ZREM', qx, t)
  if mine then
    redis.call('DEL', lk)
    wake = true
    r = 1
  end
  return done(r)
end
if mine then
  redis.call('ZREM', q, t)
  redis.call('ZREM', qx, t)
  return done({1, tonumber(string.match(v, '^[^:]*:(%d+):'))})
end
if not redis.call('ZSCORE', q, t) then
  if op ~= 'enqueue' then
    return done({2})
  end
  local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', q, ms((last and tonumber(last) or 0) + 1), t)
end
redis.call('ZADD', qx, ms(now + tonumber(ttl)), t)
local head = redis.call('ZRANGE', q, 0, 0)[1]
if not v and head == t then
  local fence = redis.call('INCR', fk)
  redis.call('SET', lk, t .. ':' .. ms(fence) .. ':' .. ARGV[4], 'PX', ttl)
  redis.call('ZREM', q, t)
  redis.call('ZREM', qx, t)
  return done({1, fence})
end
if v then
  return done({0, v, redis.call('PTTL', lk)})
end
-- The key is free, for the head: wait until it takes it or its entry ends.
return done({0, '', tonumber(redis.call('ZSCORE', qx, head)) - now})
