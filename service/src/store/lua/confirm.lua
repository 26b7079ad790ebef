-- Confirms a hold (POST /api/v1/orders/{id}/confirm): reserved -> confirmed, while its expiry
-- (the due set's score, on this Redis's clock) has not come. A hold found due is expired here,
-- in the same step, so a confirm racing the sweeper ends in exactly one of them and both see
-- the same record.
-- A multi-segment order's primary queues the change for its other parts in follow (hold_end.lua:
-- "|confirmed", or "|expired" when found due); a part's own id is not an order:
-- {STORE_CONFIRM_NONE}, nothing written.
-- KEYS: stock, cnt, orders, due, give, log, sver, follow.  ARGV: order id, "1" with the order
-- log.
-- -> {code[, record]}, code one of STORE_CONFIRM_* (store_scripts.h); an error (nothing
--    written) when the record or the segment is damaged; {.._EXPIRED, record, 1} when this call
--    expired the hold (it was due), without the 1 when it had expired before
-- @include int.lua
-- @include now.lua
-- @include log.lua
local logging = ARGV[2] == '1'
-- @include hold_end.lua
local o, q = order_read(ARGV[1])
if not o then
  if q == 'none' then return {STORE_CONFIRM_NONE} end
  return redis.error_reply('ERR order record or segment damaged')
end
if o.part_of ~= nil then return {STORE_CONFIRM_NONE} end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if o.status == ORDER_STATUS_CONFIRMED then return {STORE_CONFIRM_ALREADY, rec} end
if o.status == ORDER_STATUS_CANCELLED then return {STORE_CONFIRM_CANCELLED, rec} end
if o.status == ORDER_STATUS_EXPIRED then return {STORE_CONFIRM_EXPIRED, rec} end
if o.status ~= ORDER_STATUS_RESERVED then return {STORE_CONFIRM_NOT_RESERVED, rec} end
local due = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]) or '0')
if due > 0 and now >= due then
  return {STORE_CONFIRM_EXPIRED, order_end(ARGV[1], o, q, ORDER_STATUS_EXPIRED, now), 1}
end
o.status = ORDER_STATUS_CONFIRMED
o.expires_at = nil
rec = cjson.encode(o)
redis.call('HSET', KEYS[3], ARGV[1], rec)
redis.call('HINCRBY', KEYS[2], 'r', -q)
redis.call('ZREM', KEYS[4], ARGV[1])
order_follow(ARGV[1], o, ORDER_STATUS_CONFIRMED, now)
order_logged(ARGV[1], o, q, ORDER_STATUS_CONFIRMED, now)
return {STORE_CONFIRM_DONE, rec}
