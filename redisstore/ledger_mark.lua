-- ledger_mark.lua: store one node's claim mark and return every mark kept.
--
-- KEYS[1]   the marks hash: node -> expiry .. ':' .. mark
-- ARGV[1]   the node
-- ARGV[2]   the mark, encoded by the caller (opaque here)
-- ARGV[3]   how long to keep it, in ms
--
-- The expiry is unix microseconds by Redis's clock (TIME). Marks whose
-- expiry has passed are deleted. Returns a flat list: node, mark, node,
-- mark, ...
local now = redis.call('TIME')
local us = now[1] * 1000000 + now[2]
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', us + ARGV[3] * 1000) .. ':' .. ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local c = string.find(v, ':', 1, true)
  if c and tonumber(string.sub(v, 1, c - 1)) > us then
    out[#out + 1] = all[i]
    out[#out + 1] = string.sub(v, c + 1)
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return out
