-- KEYS: meta, rst.  -> {version, segments, stock, state, hwm, {rid, "v:units", ...}} ("" for a
-- missing field: a layout written before state/stock/hwm existed is complete). An error when a
-- number of meta or of a pending restock (rid, version, units) is damaged: every settle and
-- every answer built on it would act on a number Redis does not hold.
-- @include int.lua
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'stock', 'state', 'hwm')
for i = 1, 5 do
  if not m[i] then m[i] = ''
  elseif i ~= 4 and not int(m[i]) then return damaged(KEYS[1]) end
end
m[6] = redis.call('HGETALL', KEYS[2])
for i = 1, #m[6], 2 do
  local v, u = string.match(m[6][i + 1], '^([^:]*):(.*)$')
  if not int(m[6][i]) or not int(v) or (int(u) or -1) < 0 then
    return damaged(KEYS[2])
  end
end
return m
