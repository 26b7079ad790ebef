-- KEYS: stock, cnt, orders.  ARGV: order id.
-- -> {code[, record]}, code one of STORE_CANCEL_* (store_scripts.h); an error (nothing
--    written) when the record or the segment is damaged
-- @include int.lua
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then return {STORE_CANCEL_NONE} end
local ok, o = pcall(cjson.decode, rec)
if not ok or type(o) ~= 'table' then
  return redis.error_reply('ERR order record damaged')
end
if o.status == 'cancelled' then return {STORE_CANCEL_ALREADY, rec} end
local q = tonumber(o.quantity)
local n = int(redis.call('GET', KEYS[1]) or '')
local c = redis.call('HMGET', KEYS[2], 's', 'o')
local s, cnt = int(c[1] or ''), int(c[2] or '')
if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) or n == nil or s == nil or cnt == nil
   or s < q or cnt < 1 then
  return redis.error_reply('ERR segment damaged')
end
o.status = 'cancelled'
rec = cjson.encode(o)
redis.call('HSET', KEYS[3], ARGV[1], rec)
redis.call('INCRBY', KEYS[1], q)
redis.call('HINCRBY', KEYS[2], 's', -q)
redis.call('HINCRBY', KEYS[2], 'o', -1)
return {STORE_CANCEL_DONE, rec}
