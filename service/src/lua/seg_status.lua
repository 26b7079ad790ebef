-- One segment's status, read atomically (so t = stock + s holds in every answer).
-- KEYS: stock, sver, cnt.  -> {stock, sver, t, s, o, r} ("" for missing; r: units in reserved
-- orders, part of s); an error when one is damaged (read as 0 it would make an answer that
-- breaks t = stock + s).
-- @include int.lua
local c = redis.call('HMGET', KEYS[3], 't', 's', 'o', 'r')
local r = {redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[2]) or '',
           c[1] or '', c[2] or '', c[3] or '', c[4] or ''}
for i = 1, 6 do
  if r[i] ~= '' and not int(r[i]) then return damaged(KEYS[i <= 2 and i or 3]) end
end
return r
