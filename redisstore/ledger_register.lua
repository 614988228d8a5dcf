-- ledger_register.lua: register a job's schedule (driver.JobRegister), kept
-- in a hash of its own from job name to since .. ':' .. spec, where since is
-- when the fleet first saw the job with this spec, in unix microseconds by
-- the registering node's clock. It is apart from the job state hash, which
-- JobStates reads whole, so that registered jobs do not make that read grow.
--
-- KEYS[1] the registration hash
-- ARGV[1] the job
-- ARGV[2] the spec
-- ARGV[3] since, in unix microseconds
--
-- When the stored spec is ARGV[2] nothing changes; otherwise (or when none
-- is stored) the field becomes ARGV[3] .. ':' .. ARGV[2].
-- Returns the field's value after the call.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if sep and string.sub(cur, sep + 1) == ARGV[2] then
    return cur
  end
end
local v = ARGV[3] .. ':' .. ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], v)
return v
