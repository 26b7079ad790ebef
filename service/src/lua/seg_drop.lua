-- Drops segment k (outside the layout of that version): its keys go, its sver stays as a
-- tombstone so that an older, slower roll-out cannot bring it back.  Same KEYS; ARGV: version.
-- @include int.lua
local cur = int(redis.call('GET', KEYS[2]) or '0')
if not cur then return damaged(KEYS[2]) end
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
redis.call('SET', KEYS[2], ARGV[1])
return 1
