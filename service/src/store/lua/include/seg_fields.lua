-- seg_fields(stock, sver, cnt): one segment's status as lua/seg_status.lua answers it (see
-- there), or the error reply of a damaged number. Needs int.lua included before it.
local function seg_fields(stock, sver, cnt)
  local c = redis.call('HMGET', cnt, 't', 's', 'o', 'r')
  local r = {redis.call('GET', stock) or '', redis.call('GET', sver) or '',
             c[1] or '', c[2] or '', c[3] or '', c[4] or ''}
  local keys = {stock, sver, cnt}
  for i = 1, 6 do
    if r[i] ~= '' and not int(r[i]) then return damaged(keys[i <= 2 and i or 3]) end
  end
  return r
end
