-- ledger_claim.lua: claim a batch of ledger keys, each once.
--
-- KEYS[i]        claim key i (all in one hash slot on a Cluster)
-- ARGV           per key i, ARGV[3*i-2] token i, ARGV[3*i-1] node i and
--                ARGV[3*i] retention i in ms; or, when every claim of the
--                call has the same three, ARGV[1], ARGV[2] and ARGV[3] only
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
-- SET NX GET (Redis 7.0 and later) sets a new claim and returns nil, or
-- returns the value that is there: one command whether the key is new or
-- not. Before 7.0 SET takes NX or GET, not both (a syntax error, nothing
-- written): then the claim is a SET NX and, when the key is there, a GET.
local nxget = true
local function claim(k, v, ttl)
  if nxget then
    local old = redis.pcall('SET', k, v, 'NX', 'GET', 'PX', ttl)
    if type(old) ~= 'table' then
      return old
    end
    if not string.find(old.err, 'syntax', 1, true) then
      error(old)
    end
    nxget = false
  end
  if redis.call('SET', k, v, 'NX', 'PX', ttl) then
    return false
  end
  return redis.call('GET', k) or '' -- never nil: no key expires while a script runs
end

local out = {}
local per = 3 -- ARGV values per key: 0 when they are the same for all
if #ARGV == 3 then
  per = 0
end
local own, v, ttl -- #token .. ':' .. token, the value, the retention
for i = 1, #KEYS do
  if i == 1 or per > 0 then
    local j = per * (i - 1)
    local t = ARGV[j + 1]
    own = #t .. ':' .. t
    v = own .. at .. ':' .. ARGV[j + 2]
    ttl = ARGV[j + 3]
  end
  local old = claim(KEYS[i], v, ttl)
  -- Held by this token already when the value starts with own: a value
  -- starts with its token's length and ':', so no other token's value
  -- does.
  if not old or string.sub(old, 1, #own) == own then
    out[i] = 1
  else
    out[i] = old
  end
end
return out
