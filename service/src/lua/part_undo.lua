-- Undoes a part of a multi-segment order that never became whole: its primary record was never
-- written and no longer can be (docs/design.md "Orders larger than one segment"). The part's
-- record goes, its units come back, the counters go down (s, and r for a hold; o counts orders, never parts). Idempotent: a part already undone, or
-- never written (or gone with a reset of the segment), answers 0.
-- KEYS: stock, cnt, orders.  ARGV: part id.
-- -> 1 undone, 0 no such record; an error, nothing written, for a record that is not a live
--    part (never undo a primary or an ended part) or a damaged segment
-- @include int.lua
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then return 0 end
local ok, o = pcall(cjson.decode, rec)
if not ok or type(o) ~= 'table' or type(o.part_of) ~= 'string' then
  return redis.error_reply('ERR ' .. ARGV[1] .. ' is not a part of a multi-segment order')
end
local q = tonumber(o.quantity)
if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) then
  return redis.error_reply('ERR part ' .. ARGV[1] .. ': damaged record')
end
if o.status ~= 'created' and o.status ~= 'reserved' then
  return redis.error_reply('ERR part ' .. ARGV[1] .. ' is ' .. tostring(o.status))
end
local n = int(redis.call('GET', KEYS[1]) or '')
local c = redis.call('HMGET', KEYS[2], 's', 'o', 'r')
local s, cnt, r = int(c[1] or ''), int(c[2] or ''), int(c[3] or '0')
if not n or not s or not cnt or not r or s < q or
   (o.status == 'reserved' and r < q) then
  return redis.error_reply('ERR part ' .. ARGV[1] .. ': damaged segment')
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('INCRBY', KEYS[1], q)
redis.call('HINCRBY', KEYS[2], 's', -q)
if o.status == 'reserved' then redis.call('HINCRBY', KEYS[2], 'r', -q) end
return 1
