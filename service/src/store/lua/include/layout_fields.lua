-- layout_fields(meta, rst, fields): the layout of a SKU as lua/layout_read.lua answers it (see
-- there), or the error reply of a damaged number. A field named "$<f>" is a string rule
-- (rules_table.h STR rows): meta field f, read as it is, not checked as a number. Needs int.lua
-- included before it.
local function layout_fields(meta, rst, fields)
  local names, str = {}, {}
  for i, f in ipairs(fields) do
    if string.sub(f, 1, 1) == '$' then
      names[i] = string.sub(f, 2)
      str[6 + i] = true
    else
      names[i] = f
    end
  end
  local m = redis.call('HMGET', meta, 'version', 'segments', 'stock', 'state', 'hwm', 'rver',
                      unpack(names))
  local holds = redis.call('HGET', meta, 'holds') or ''
  for i = 1, 6 + #fields do
    if not m[i] then m[i] = ''
    elseif i ~= 4 and not str[i] and not int(m[i]) then return damaged(meta) end
  end
  local rs = redis.call('HGETALL', rst)
  for i = 1, #rs, 2 do
    local v, u = string.match(rs[i + 1], '^([^:]*):(.*)$')
    if not int(rs[i]) or not int(v) or (int(u) or -1) < 0 then
      return damaged(rst)
    end
  end
  table.insert(m, 6, rs)
  m[#m + 1] = holds
  return m
end
