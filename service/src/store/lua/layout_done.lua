-- Marks the layout rolled out, if it is still the current one. hwm comes down to the layout's
-- segments; lhwm ("log high-water mark") keeps every dropped segment whose order log is left
-- (ARGV[3]: 1 + the highest such segment, 0 none) findable until inventory-sink has drained
-- and dropped it (log_forget.lua lowers it).
-- KEYS: meta.  ARGV: version, segments, logs.  -> 1 marked, 0 a newer layout is current
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
local lhwm = tonumber(redis.call('HGET', KEYS[1], 'lhwm') or '0') or 0
local logs = tonumber(ARGV[3] or '0') or 0
if logs > lhwm then redis.call('HSET', KEYS[1], 'lhwm', logs) end
redis.call('HSET', KEYS[1], 'state', 'r', 'hwm', ARGV[2])
return 1
