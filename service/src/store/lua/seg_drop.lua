-- Drops segment k (outside the layout of that version): its keys go, its sver stays as a
-- tombstone so that an older, slower roll-out cannot bring it back. Its order log (KEYS[10])
-- stays: inventory-sink drops it once drained (log_drop.lua), and the answer 2 tells the
-- roll-out to keep it findable (meta's lhwm, layout_done.lua).
-- Same KEYS as seg_reset.lua, then the log; ARGV: version.
-- -> 1 dropped, 0 left (already at that version or newer), 2 either way with a log left
-- @include int.lua
local cur = int(redis.call('GET', KEYS[2]) or '0')
if not cur then return damaged(KEYS[2]) end
local logged = redis.call('EXISTS', KEYS[10]) == 1
if cur >= tonumber(ARGV[1]) then
  if logged then return 2 end
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
redis.call('SET', KEYS[2], ARGV[1])
if logged then return 2 end
return 1
