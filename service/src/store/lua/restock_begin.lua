-- A restock's intent: registered as pending under the current version, applied to the segments
-- by whoever rolls it out (layout.c); a damaged version, segments or rseq fails it with
-- nothing written. KEYS: meta, rst, aidem.  ARGV: units, has key, key ttl.
-- -> {1, rid, version, segments} | {0, stored answer} a replay | {-1} no such SKU
-- @include int.lua
if ARGV[2] == '1' then
  local prev = redis.call('GET', KEYS[3])
  if prev then return {0, prev} end
end
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'rseq')
if not int(m[1] or '0') or not int(m[2] or '0') or not int(m[3] or '0') then
  return damaged(KEYS[1])
end
if not m[1] or int(m[2] or '0') == 0 then return {-1} end
redis.call('HLEN', KEYS[2])
local prev = int(m[3] or '0')
-- @include next_id.lua
local rid = string.format('%.0f', nid)
redis.call('HSET', KEYS[1], 'rseq', rid)
redis.call('HSET', KEYS[2], rid, m[1] .. ':' .. ARGV[1])
if ARGV[2] == '1' then
  redis.call('SET', KEYS[3], 'P ' .. rid .. ' ' .. ARGV[1], 'PX', ARGV[3])
end
return {1, nid, int(m[1]), int(m[2])}
