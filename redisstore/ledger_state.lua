-- ledger_state.lua: change the job states every node obeys, kept in one
-- hash from job name to state.
--
-- KEYS[1] the job state hash
-- ARGV[1] the operation: 'pause', 'resume', 'trigger' or 'done' on one job;
--         'prune' on every job
-- ARGV[2] the job ('prune': the age in microseconds past which trigger
--         requests are deleted)
-- ARGV[3] the trigger request's ID ('trigger' and 'done')
-- ARGV[4] 'trigger': the request's past tick, '' for a trigger-now (see
--         below)
--
-- A state is '1' (paused) or '0', followed by each pending trigger request,
-- oldest first, as ':' .. at .. tick .. ':' .. #id .. ':' .. id, where at
-- is when Redis received it, in unix microseconds by its clock (TIME), and
-- tick is '' for a trigger-now (the only form before backfills existed)
-- or, for a backfill or re-run, '@' .. the tick in unix microseconds,
-- followed by 'r' for a re-run; a cancel request (ledger.JobCancel) adds
-- 'c' .. shard .. '.' .. the run's trigger ID in hex (ledger.go
-- triggerTick). The script keeps tick as it is. A job in the default state
-- (not paused, nothing pending) has no field.
--
-- Returns the job's state after the change ('prune': the number of trigger
-- requests deleted).
local function now()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

local function decode(v)
  local st = {paused = string.sub(v, 1, 1) == '1', ats = {}, ticks = {}, ids = {}}
  local pos = 2
  while pos <= #v do
    local at, tick, n, p = string.match(v, '^:(%-?%d+)([^:]*):(%d+):()', pos)
    st.ats[#st.ats + 1] = at
    st.ticks[#st.ticks + 1] = tick
    st.ids[#st.ids + 1] = string.sub(v, p, p + tonumber(n) - 1)
    pos = p + tonumber(n)
  end
  return st
end

local function encode(st)
  local parts = {st.paused and '1' or '0'}
  for i, id in ipairs(st.ids) do
    parts[#parts + 1] = ':' .. st.ats[i] .. st.ticks[i] .. ':' .. #id .. ':' .. id
  end
  return table.concat(parts)
end

local function store(job, st)
  local v = encode(st)
  if v == '0' then
    redis.call('HDEL', KEYS[1], job)
  else
    redis.call('HSET', KEYS[1], job, v)
  end
  return v
end

-- without returns st without the trigger requests keep rejects, and how
-- many it dropped.
local function without(st, drop)
  local ats, ticks, ids = {}, {}, {}
  for i, id in ipairs(st.ids) do
    if not drop(st.ats[i], id) then
      ats[#ats + 1] = st.ats[i]
      ticks[#ticks + 1] = st.ticks[i]
      ids[#ids + 1] = id
    end
  end
  local n = #st.ids - #ids
  st.ats, st.ticks, st.ids = ats, ticks, ids
  return n
end

local op = ARGV[1]
if op == 'prune' then
  local cutoff = now() - tonumber(ARGV[2])
  local all = redis.call('HGETALL', KEYS[1])
  local deleted = 0
  for i = 1, #all, 2 do
    local st = decode(all[i + 1])
    local n = without(st, function(at) return tonumber(at) < cutoff end)
    if n > 0 then
      store(all[i], st)
      deleted = deleted + n
    end
  end
  return deleted
end

local job, id = ARGV[2], ARGV[3]
local st = decode(redis.call('HGET', KEYS[1], job) or '0')
if op == 'pause' then
  st.paused = true
elseif op == 'resume' then
  st.paused = false
elseif op == 'trigger' then
  local pending = false
  for _, x in ipairs(st.ids) do
    if x == id then
      pending = true
    end
  end
  if not pending then
    st.ats[#st.ats + 1] = string.format('%d', now())
    st.ticks[#st.ticks + 1] = ARGV[4] or ''
    st.ids[#st.ids + 1] = id
  end
elseif op == 'done' then
  without(st, function(_, x) return x == id end)
else
  return redis.error_reply('unknown op ' .. op)
end
return store(job, st)
