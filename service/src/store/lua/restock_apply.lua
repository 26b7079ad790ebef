-- Applies restock rid's share to segment k, once; a damaged sver, stock or t is an error
-- with nothing written (else INCRBY could pass and HINCRBY fail, and every settle would add
-- the units again). KEYS: stock, sver, cnt, rst.  ARGV: version, units, rid.
-- -> 1 applied now, 0 applied before, -1 the segment is not at that version
-- @include int.lua
local sv = redis.call('GET', KEYS[2])
if sv and not int(sv) then return damaged(KEYS[2]) end
if sv ~= ARGV[1] then return -1 end
if redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 1 then return 0 end
if not int(redis.call('GET', KEYS[1]) or '') then return damaged(KEYS[1]) end
if not int(redis.call('HGET', KEYS[3], 't') or '') then return damaged(KEYS[3]) end
if ARGV[2] ~= '0' then
  redis.call('INCRBY', KEYS[1], ARGV[2])
  redis.call('HINCRBY', KEYS[3], 't', ARGV[2])
end
redis.call('SADD', KEYS[4], ARGV[3])
return 1
