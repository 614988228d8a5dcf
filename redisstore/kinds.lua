-- kinds.lua: what the scripts of read-write locks, semaphores and fair
-- queues share. scripts.go puts it in front of each of them (Redis has no
-- includes), so it defines functions only.
--
-- The read-write lock or semaphore on user key K is three containers in
-- K's hash slot (see kindsKeys in kinds.go), which expire (PEXPIREAT) with
-- their last entry, so that an abandoned key vanishes by itself:
--
--   h     hash: token -> mode .. ':' .. fence .. ':' .. owner, mode 'r'
--         (reader), 'w' (writer), 'p' (permit) or 'c' (a writer's waiting
--         claim, fence 0); and ':limit' -> the permits (0: a read-write
--         lock), ':w' -> the writer's token. Tokens hold no ':', so the
--         two kinds of field never meet.
--   held  sorted set: the token of every hold -> its expiry
--   wait  sorted set: the token of every claim -> its expiry
--
-- Expiries are unix milliseconds by Redis's clock (TIME); an entry whose
-- expiry is not after now is gone. The fence counter, a fourth key, has no
-- expiry: it outlives the entries, like a mutex's.

-- nowMs returns Redis's clock in unix milliseconds.
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ms formats an integer for Redis: '%d', because Lua 5.1 formats numbers
-- with %.14g, which turns a large one into exponent notation.
local function ms(n)
  return string.format('%d', n)
end

-- zdrop removes members from the sorted set z and, when h is given, the
-- fields of the hash h so named, a thousand at a time (unpack's limit).
local function zdrop(z, h, members)
  for i = 1, #members, 1000 do
    local part = {unpack(members, i, math.min(i + 999, #members))}
    redis.call('ZREM', z, unpack(part))
    if h then
      redis.call('HDEL', h, unpack(part))
    end
  end
end

-- prune deletes the entries of k that expired by now and returns how many
-- it deleted.
local function prune(k, now)
  local n = 0
  for _, z in ipairs({k.held, k.wait}) do
    local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
    if #gone > 0 then
      zdrop(z, k.h, gone)
      n = n + #gone
    end
  end
  if n > 0 then
    local w = redis.call('HGET', k.h, ':w')
    if w and not redis.call('ZSCORE', k.held, w) then
      redis.call('HDEL', k.h, ':w')
    end
  end
  return n
end

-- lastExpiry returns the highest expiry in the sorted sets zs, 0 if empty.
local function lastExpiry(zs)
  local last = 0
  for _, z in ipairs(zs) do
    local e = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')[2]
    if e and tonumber(e) > last then
      last = tonumber(e)
    end
  end
  return last
end

-- settle makes the containers cs expire with the last entry of the sorted
-- sets zs, or deletes them when there is none.
local function settle(cs, zs)
  local last = lastExpiry(zs)
  if last == 0 then
    redis.call('DEL', unpack(cs))
    return
  end
  for _, c in ipairs(cs) do
    redis.call('PEXPIREAT', c, ms(last))
  end
end

-- settleKinds settles the containers of kinds key k.
local function settleKinds(k)
  settle({k.h, k.held, k.wait}, {k.held, k.wait})
end

-- fenceOf and ownerOf read an entry's value.
local function fenceOf(v)
  return tonumber(string.match(v, '^.:(%d+):'))
end

local function ownerOf(v)
  return string.match(v or '', '^.:%d+:(.*)$') or ''
end

-- heldBy is a refusal naming the hold of token t: {0, owner, ms left}.
local function heldBy(k, t, now)
  local e = redis.call('ZSCORE', k.held, t)
  return {0, ownerOf(redis.call('HGET', k.h, t)), e and (tonumber(e) - now) or 0}
end

-- kindsOf returns the containers of the kinds key whose KEYS start at i.
local function kindsOf(i)
  return {h = KEYS[i], held = KEYS[i + 1], wait = KEYS[i + 2]}
end

-- renewKind extends token t's hold of mode for ttl ms from now, and
-- returns 1, or 0 when t holds no live entry of that mode.
local function renewKind(k, t, ttl, mode, now)
  local v = redis.call('HGET', k.h, t)
  if not v or string.sub(v, 1, 1) ~= mode or not redis.call('ZSCORE', k.held, t) then
    return 0
  end
  redis.call('ZADD', k.held, ms(now + tonumber(ttl)), t)
  return 1
end

