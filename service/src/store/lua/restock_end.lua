-- Records restock rid as applied everywhere (call only once every segment of its version
-- took it). KEYS: meta, rst, rres.  ARGV: rid, version, ttl ms.
-- -> 1 done (now or before), 0 superseded (a PUT or DELETE came first)
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[2] then return 0 end
if not redis.call('HGET', KEYS[2], ARGV[1]) then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return 1
