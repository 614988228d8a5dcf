-- catalog_audit.lua: read audit entries, newest first.
--
-- KEYS[1] an audit index: every seq, or one job's (sorted sets of seqs
--         scored by themselves)
-- KEYS[2] the audit entries: a hash from seq to entry (catalog_write.lua)
-- ARGV[1] the highest seq, a ZREVRANGEBYSCORE bound ('+inf', '(123')
-- ARGV[2] at most this many entries, 0 for all
--
-- Returns {seq, entry, ...}, seq descending.
local seqs
local limit = tonumber(ARGV[2])
if limit > 0 then
  seqs = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'LIMIT', 0, limit)
else
  seqs = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf')
end
local out = {}
for i = 1, #seqs, 1000 do
  local part = {unpack(seqs, i, math.min(i + 999, #seqs))}
  local vs = redis.call('HMGET', KEYS[2], unpack(part))
  for j, seq in ipairs(part) do
    if vs[j] then
      out[#out + 1] = seq
      out[#out + 1] = vs[j]
    end
  end
end
return out
