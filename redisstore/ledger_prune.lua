-- ledger_prune.lua: delete one job's old run records.
--
-- KEYS[1] the job's runs index (sorted set of run members scored by tick)
-- KEYS[2] the job's records (hash from run member to record)
-- KEYS[3] the job's record times (sorted set of run members scored by the
--         time recorded)
-- ARGV[1] delete records recorded more than this many microseconds before
--         Redis's now (TIME); 0: none by age
-- ARGV[2] then keep only the newest this many records in listing order
--         (tick descending, trigger and shard ascending, attempt descending); 0: all
--
-- Returns the number of records deleted.
local deleted = 0
local function drop(ms, from)
  for i = from, #ms, 1000 do
    local part = {unpack(ms, i, math.min(i + 999, #ms))}
    redis.call('ZREM', KEYS[1], unpack(part))
    redis.call('HDEL', KEYS[2], unpack(part))
    redis.call('ZREM', KEYS[3], unpack(part))
    deleted = deleted + #part
  end
end

local age = tonumber(ARGV[1])
if age > 0 then
  local now = redis.call('TIME')
  local cutoff = now[1] * 1000000 + now[2] - age
  drop(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', cutoff)), 1)
end

-- bytesLess compares byte by byte: Lua's '<' on strings follows the
-- server's LC_COLLATE, and the listing order is by bytes.
local function bytesLess(x, y)
  for i = 1, math.min(#x, #y) do
    local a, b = string.byte(x, i), string.byte(y, i)
    if a ~= b then
      return a < b
    end
  end
  return #x < #y
end

-- parse returns a run member's shard, attempt and trigger: the member is
-- tick .. ':' .. attempt .. ':' .. trigger for shard 0 and tick .. '/' ..
-- shard .. ':' .. attempt .. ':' .. trigger for the others.
local function parse(m)
  local s, a, t = string.match(m, '^%-?%d+/?(%d*):(%-?%d+):(.*)$')
  return tonumber(s) or 0, tonumber(a), t
end

-- listed reports whether run member a is listed before b, both of one
-- tick: trigger ascending, then shard ascending, then attempt descending.
local function listed(a, b)
  local as, aa, at = parse(a)
  local bs, ba, bt = parse(b)
  if at ~= bt then
    return bytesLess(at, bt)
  end
  if as ~= bs then
    return as < bs
  end
  return aa > ba
end

local keep = tonumber(ARGV[2])
if keep > 0 and redis.call('ZCARD', KEYS[1]) > keep then
  -- Records with a later tick than the keep-th newest stay, those with an
  -- earlier one go; within its tick the listing order decides.
  local score = redis.call('ZREVRANGE', KEYS[1], keep - 1, keep - 1, 'WITHSCORES')[2]
  local later = redis.call('ZCOUNT', KEYS[1], '(' .. score, '+inf')
  local same = redis.call('ZRANGEBYSCORE', KEYS[1], score, score)
  table.sort(same, listed)
  drop(same, keep - later + 1)
  drop(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. score), 1)
end
return deleted
