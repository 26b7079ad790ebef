-- inventory-sink: lowers a SKU's lhwm (layout_done.lua) once the logs of the dropped segments
-- at and above ARGV[2] are gone (log_drop.lua), if the layout it looked at is still the
-- current one and rolled out: a PUT or DELETE since may have made logs there again.
-- KEYS: meta.  ARGV: version, new lhwm.  -> 1 lowered, 0 left
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'r' then return 0 end
local cur = tonumber(redis.call('HGET', KEYS[1], 'lhwm') or '0') or 0
local want = tonumber(ARGV[2])
if want >= cur then return 0 end
local segs = tonumber(redis.call('HGET', KEYS[1], 'segments') or '0') or 0
if want <= segs then
  redis.call('HDEL', KEYS[1], 'lhwm')
else
  redis.call('HSET', KEYS[1], 'lhwm', want)
end
return 1
