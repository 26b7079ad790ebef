-- GET of a limit group (docs/design.md "Limit groups"), in one step.
-- KEYS: the group's meta, its users.
-- -> {limit ("" no such group), users with a count, version}
local m = redis.call('HMGET', KEYS[1], 'limit', 'ver')
return {m[1] or '', redis.call('HLEN', KEYS[2]), m[2] or ''}
