-- ledger_claim.lua: claim a batch of ledger keys, each once.
--
-- KEYS[i]        claim key i (all in one hash slot on a Cluster)
-- ARGV[3*i-2]    token i
-- ARGV[3*i-1]    node i
-- ARGV[3*i]      retention i in ms
--
-- A claim is a string key with a PX expiry of its retention, holding
-- #token .. ':' .. token .. at .. ':' .. node, where at is the claim time in
-- unix microseconds by Redis's clock (TIME).
--
-- Returns one reply per key: 1 when the key is now claimed by token i (by
-- this call or an earlier one with the same token), and the claim's value
-- when another token holds it.
local now = redis.call('TIME')
local at = string.format('%d', now[1] * 1000000 + now[2])
local out = {}
for i = 1, #KEYS do
  local t = ARGV[3 * i - 2]
  -- One command for a new claim (the common case, one claim per tick);
  -- a GET only when the key is there.
  if redis.call('SET', KEYS[i], #t .. ':' .. t .. at .. ':' .. ARGV[3 * i - 1], 'NX', 'PX', ARGV[3 * i]) then
    out[i] = 1
  else
    local v = redis.call('GET', KEYS[i]) or '' -- never nil: no key expires while a script runs
    local c = string.find(v, ':', 1, true)
    if c and tonumber(string.sub(v, 1, c - 1)) == #t and string.sub(v, c + 1, c + #t) == t then
      out[i] = 1
    else
      out[i] = v
    end
  end
end
return out
