-- KEYS: meta, rst.  -> {version, segments, stock, state, hwm, {rid, "v:units", ...}, limit,
-- sale_start, sale_end, ttl, holds} ("" for a missing field: a layout written before
-- state/stock/hwm or the sale rules (rules.h) existed is complete; holds: "1", "l" or "0",
-- docs/design.md "The sweeper", "" in a layout written before it). An error when a
-- number of meta or of a pending restock (rid, version, units) is damaged: every settle and
-- every answer built on it would act on a number Redis does not hold.
-- @include int.lua
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'stock', 'state', 'hwm', 'limit',
                    'sale_start', 'sale_end', 'ttl')
local holds = redis.call('HGET', KEYS[1], 'holds') or ''
for i = 1, 9 do
  if not m[i] then m[i] = ''
  elseif i ~= 4 and not int(m[i]) then return damaged(KEYS[1]) end
end
m[10] = redis.call('HGETALL', KEYS[2])
for i = 1, #m[10], 2 do
  local v, u = string.match(m[10][i + 1], '^([^:]*):(.*)$')
  if not int(m[10][i]) or not int(v) or (int(u) or -1) < 0 then
    return damaged(KEYS[2])
  end
end
return {m[1], m[2], m[3], m[4], m[5], m[10], m[6], m[7], m[8], m[9], holds}
