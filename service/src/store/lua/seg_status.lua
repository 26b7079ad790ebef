-- One segment's status, read atomically (so t = stock + s holds in every answer).
-- KEYS: stock, sver, cnt.  -> {stock, sver, t, s, o, r} ("" for missing; r: units in reserved
-- orders, part of s); an error when one is damaged (read as 0 it would make an answer that
-- breaks t = stock + s).
-- @include int.lua
-- @include seg_fields.lua
return seg_fields(KEYS[1], KEYS[2], KEYS[3])
