-- DELETE's intent: a layout of 0 segments (state "p"), rolled out like a PUT's; damaged
-- numbers as for PUT_META; the SKU's per-user counts and its multi-segment orders' intents go
-- with its orders, and so does its waiting room (the gate, its places, admissions and tickets:
-- a SKU made again starts with an empty line; a PUT keeps them).
-- KEYS: meta, ver, rst, users, multi, q, q:line, q:adm, q:live.  -> the new version, or 0 when there is no
-- such SKU
-- @include int.lua
-- @include old_layout.lua
if not old[1] or oldseg == 0 then return 0 end
local prev = int(redis.call('GET', KEYS[2]) or '0')
if not prev then return damaged(KEYS[2]) end
local hwm = math.max(oldhwm, oldseg)
-- @include next_id.lua
local v = string.format('%.0f', nid)
redis.call('SET', KEYS[2], v)
redis.call('HSET', KEYS[1], 'version', v, 'segments', 0, 'stock', 0, 'state', 'p',
           'hwm', hwm)
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
return nid
