-- The segments whose turn in the hold index has come (store.h store_holds_key, one Redis;
-- docs/design.md "The sweeper"): the sweeper runs the expiry sweep (expire.lua) on each, which
-- sets the segment's next turn in the same step as its due set, or takes it out of the index.
-- KEYS: the hold index.  ARGV: most members to return.
-- -> {now (Redis ms), member, ...}: members "<sku>/<k>" with a score at most now, the earliest
--    first
-- @include now.lua
local r = {now}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0,
                              tonumber(ARGV[1]))) do
  r[#r + 1] = m
end
return r
