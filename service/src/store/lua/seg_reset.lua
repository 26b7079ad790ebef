-- Resets segment k to a layout's version, once: a segment already at that version or a newer
-- one is left alone, so concurrent and repeated roll-outs of any PUTs converge on the newest.
-- A damaged sver is an error (its version unknown, the segment may be a newer layout's).
-- KEYS: stock, sver, cnt, orders, idem, rst, due, give, follow (the multi-segment orders' follows
-- queued here go with the orders they name).  ARGV: version, units.  -> 1 reset, 0 left
-- @include int.lua
local cur = int(redis.call('GET', KEYS[2]) or '0')
if not cur then return damaged(KEYS[2]) end
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], 't', ARGV[2], 's', 0, 'o', 0)
return 1
