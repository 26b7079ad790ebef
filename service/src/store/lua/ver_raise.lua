-- Raises the SKU's version counter to at least a version seen on one of its segments, so that
-- the next PUT or DELETE gets a version above it (a segment ahead of the meta: the meta write of
-- a later PUT was lost in a failover, with the INCR of the counter). Never lowers it.
-- KEYS: ver.  ARGV: version seen.  -> the counter
local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if v < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return v
