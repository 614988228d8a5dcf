-- forcerelease.lua: delete every hold of a key whoever holds it (the
-- operator's escape hatch), waking waiters like a release; after
-- kinds.lua. The fence counters stay.
--
-- KEYS[1] lock key (the mutex), KEYS[2..4] the h, held and wait of the
-- key's read-write lock or semaphore (kinds.lua)
-- ARGV[1] release channel, ARGV[2] the user's key (the message payload)
--
-- Returns 1 when the mutex or a live entry of the other kinds was deleted,
-- 0 when there was none.
local n = redis.call('DEL', KEYS[1])
local k = kindsOf(2)
local after = '(' .. ms(nowMs())
n = n + redis.call('ZCOUNT', k.held, after, '+inf') + redis.call('ZCOUNT', k.wait, after, '+inf')
redis.call('DEL', k.h, k.held, k.wait)
if n == 0 then
  return 0
end
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
