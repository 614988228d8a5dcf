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

-- add adds n to d[k][minute][what], what a status or a lateness bucket
-- (a number); flush makes the fields' names, once per batch.
local function add(d, k, minute, what, n)
  local h = d[k]
  if not h then
    h = {}
    d[k] = h
  end
  local m = h[minute]
  if not m then
    m = {}
    h[minute] = m
  end
  m[what] = (m[what] or 0) + n
end

-- rollup adds to d the change of one record's write: was is the status
-- it had ('' for no record), now the status written, and x packs where it
-- counts (rollupHours.add): the index in KEYS of its hour's hash * 4096 +
-- its minute within the hour * 64 + its lateness bucket + 1 (0: none).
local function rollup(d, x, was, now)
  if was == now then
    return
  end
  local k, minute, late = math.floor(x / 4096), math.floor(x / 64) % 64, x % 64 - 1
  local fw, fn = final(was), final(now)
  if fw then
    add(d, k, minute, was, -1)
  end
  if fn then
    add(d, k, minute, now, 1)
  end
  if late >= 0 and fw ~= fn then
    add(d, k, minute, late, fn and 1 or -1)
  end
end

-- flush writes d, fields minute .. ':' .. status and minute .. ':L' ..
-- bucket, and keeps each hash it touched ttl seconds.
local function flush(d, ttl)
  for k, h in pairs(d) do
    for minute, m in pairs(h) do
      for what, n in pairs(m) do
        if n ~= 0 then
          local field = minute .. ':' .. what
          if type(what) == 'number' then
            field = minute .. ':L' .. what
          end
          redis.call('HINCRBY', KEYS[k], field, n)
        end
      end
    end
    redis.call('EXPIRE', KEYS[k], ttl)
  end
end
