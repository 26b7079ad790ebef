-- The layout a PUT or DELETE replaces, read and checked before its first write (after
-- int.lua): old = meta's {version, segments, hwm} (KEYS[1]), oldseg and oldhwm their numbers.
-- A damaged one ends the script with nothing written: the old segments and hwm say which keys
-- must go.
local old = redis.call('HMGET', KEYS[1], 'version', 'segments', 'hwm')
local oldseg, oldhwm = int(old[2] or '0'), int(old[3] or '0')
if not oldseg or not oldhwm or oldseg < 0 or oldhwm < 0 or
   oldseg > STORE_SEGMENTS_MAX or oldhwm > STORE_SEGMENTS_MAX then
  return damaged(KEYS[1])
end
