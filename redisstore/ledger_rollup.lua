-- ledger_rollup.lua: the arithmetic of the per-minute rollups (stats.go),
-- put before ledger_record.lua and ledger_stats.lua.
--
-- A record counts once in its hour's hash, with the status it has now: a
-- write changes the counts only when it changes the record's status. So a
-- record written again (a RecordRuns repeated after an error) counts
-- once, and a running record replaced by its outcome counts as the
-- outcome. A first attempt's lateness bucket counts while the record is
-- final.

local function final(st)
  return st ~= '' and st ~= 'running'
end

local function add(d, k, field, n)
  local h = d[k]
  if not h then
    h = {}
    d[k] = h
  end
  h[field] = (h[field] or 0) + n
end

-- rollup adds to d the change of one record's write: k is the index in
-- KEYS of its hour's hash, minute its minute within the hour, late its
-- lateness bucket (-1: none), was the status it had ('' for no record)
-- and now the status written.
local function rollup(d, k, minute, late, was, now)
  if was == now then
    return
  end
  local prefix = minute .. ':'
  if final(was) then
    add(d, k, prefix .. was, -1)
  end
  if final(now) then
    add(d, k, prefix .. now, 1)
  end
  if late >= 0 and final(was) ~= final(now) then
    add(d, k, prefix .. 'L' .. late, final(now) and 1 or -1)
  end
end

-- flush writes d and keeps each hash it touched ttl seconds.
local function flush(d, ttl)
  for k, h in pairs(d) do
    for field, n in pairs(h) do
      if n ~= 0 then
        redis.call('HINCRBY', KEYS[k], field, n)
      end
    end
    redis.call('EXPIRE', KEYS[k], ttl)
  end
end
