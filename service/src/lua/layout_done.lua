-- Marks the layout rolled out, if it is still the current one.
-- KEYS: meta.  ARGV: version, segments.  -> 1 marked, 0 a newer layout is current
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'r', 'hwm', ARGV[2])
return 1
