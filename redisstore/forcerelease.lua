-- forcerelease.lua: delete a lease whoever holds it (the operator's escape
-- hatch), waking waiters like a release.
--
-- KEYS[1] lock key
-- ARGV[1] release channel, ARGV[2] the user's key (the message payload)
--
-- Returns 1 when a lease was deleted, 0 when the key was not held.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
