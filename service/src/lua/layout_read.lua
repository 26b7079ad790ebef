-- KEYS: meta, rst.  ARGV: the sale rules' meta fields (rules_table.h, in its order).
-- -> {version, segments, stock, state, hwm, {rid, "v:units", ...}, rver, the rules' values in
-- ARGV's order} ("" for a missing field: a layout written before state/stock/hwm or the sale
-- rules (rules.h) or their version existed is complete). An error when a number of meta or of
-- a pending restock (rid, version, units) is damaged: every settle and every answer built on it
-- would act on a number Redis does not hold.
-- @include int.lua
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'stock', 'state', 'hwm', 'rver',
                    unpack(ARGV))
for i = 1, 6 + #ARGV do
  if not m[i] then m[i] = ''
  elseif i ~= 4 and not int(m[i]) then return damaged(KEYS[1]) end
end
local rs = redis.call('HGETALL', KEYS[2])
for i = 1, #rs, 2 do
  local v, u = string.match(rs[i + 1], '^([^:]*):(.*)$')
  if not int(rs[i]) or not int(v) or (int(u) or -1) < 0 then
    return damaged(KEYS[2])
  end
end
table.insert(m, 6, rs)
return m
