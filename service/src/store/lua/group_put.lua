-- PUT of a limit group (docs/design.md "Limit groups"): its per-user limit, and a version that
-- every PUT raises. The users' entries are kept: a new limit applies to the counts as they are
-- (a user above a lowered limit buys nothing more until below it).
-- KEYS: the group's meta.  ARGV: limit (a canonical integer, checked by the caller).
-- -> {1 made now | 0 there before, version}
local made = redis.call('EXISTS', KEYS[1]) == 0 and 1 or 0
local v = redis.call('HINCRBY', KEYS[1], 'ver', 1)
redis.call('HSET', KEYS[1], 'limit', ARGV[1])
return {made, v}
