-- catalog_write.lua: change a job's definition and append the audit entry
-- of the change, atomically ('put'), or append an audit entry alone
-- ('append').
--
-- KEYS[1] the audit sequence counter (INCR)
-- KEYS[2] the audit entries: a hash from seq to entry
-- KEYS[3] the audit index: a sorted set of every seq, scored by itself
-- KEYS[4] the definitions: a hash from job to version .. ':' .. updated
--         .. ':' .. definition
-- KEYS[5] the versions: a hash from job to the last version it was given,
--         kept across a delete so that versions rise across a new create
-- KEYS[6] the entry's job's audit index, like KEYS[3]; absent when the
--         entry names no job
-- ARGV[1] 'put' or 'append'
-- ARGV[2] the entry's job, '' for none ('put': the job to change)
-- ARGV[3] the entry's who
-- ARGV[4] its action
-- ARGV[5] its detail
-- ARGV[6] 'put': the new definition
-- ARGV[7] 'put': '1' to delete the definition
-- ARGV[8] 'put': the version to change: 0 any, -1 only when none is
--         stored, n only when n is
--
-- An entry is at .. ':' followed by who, job, action and detail, each as
-- #field .. ':' .. field. Times (updated, at) are unix microseconds by
-- Redis's clock (TIME); a seq is the next value of KEYS[1], so seqs rise.
--
-- Returns 'put': {'ok', the definition after the change (for a delete,
-- the deleted one)}, {'version'} when ARGV[8] does not match, {'nodef'}
-- for a delete of a job with no definition; 'append': the entry's seq.
-- A refused put changes nothing and appends nothing.
local t = redis.call('TIME')
local at = string.format('%d', t[1] * 1000000 + t[2])
local job = ARGV[2]

local function append()
  local seq = string.format('%d', redis.call('INCR', KEYS[1]))
  local e = {at, ':'}
  for _, f in ipairs({ARGV[3], job, ARGV[4], ARGV[5]}) do
    e[#e + 1] = #f .. ':' .. f
  end
  redis.call('HSET', KEYS[2], seq, table.concat(e))
  redis.call('ZADD', KEYS[3], seq, seq)
  if KEYS[6] then
    redis.call('ZADD', KEYS[6], seq, seq)
  end
  return seq
end

if ARGV[1] == 'append' then
  return append()
elseif ARGV[1] ~= 'put' then
  return redis.error_reply('unknown op ' .. ARGV[1])
end

local cur = redis.call('HGET', KEYS[4], job)
local curv = cur and tonumber(string.match(cur, '^(%d+):'))
local ifv = tonumber(ARGV[8])
if (ifv == -1 and cur) or (ifv > 0 and curv ~= ifv) then
  return {'version'}
end
local v
if ARGV[7] == '1' then
  if not cur then
    return {'nodef'}
  end
  redis.call('HDEL', KEYS[4], job)
  v = cur
else
  local n = redis.call('HINCRBY', KEYS[5], job, 1)
  v = string.format('%d', n) .. ':' .. at .. ':' .. ARGV[6]
  redis.call('HSET', KEYS[4], job, v)
end
append()
return {'ok', v}
