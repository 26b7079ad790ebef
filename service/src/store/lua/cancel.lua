-- Cancels an order (DELETE /api/v1/orders/{id}): created, reserved or confirmed.
-- A multi-segment order's primary queues the change for its other parts in follow (hold_end.lua);
-- a part's own id is not an order: {STORE_CANCEL_NONE}, nothing written.
-- KEYS: stock, cnt, orders, due, give, log, sver, follow.  ARGV: order id, "1" with the order
-- log.
-- -> {code[, record]}, code one of STORE_CANCEL_* (store_scripts.h); an error (nothing
--    written) when the record or the segment is damaged; {.._EXPIRED, record, 1} when this call
--    expired the hold (it was due), without the 1 when it had expired before
-- @include int.lua
-- @include now.lua
-- @include log.lua
local logging = ARGV[2] == '1'
-- @include hold_end.lua
local o, q = order_read(ARGV[1])
if not o then
  if q == 'none' then return {STORE_CANCEL_NONE} end
  return redis.error_reply('ERR order record or segment damaged')
end
if o.part_of ~= nil then return {STORE_CANCEL_NONE} end
if o.status == ORDER_STATUS_CANCELLED then return {STORE_CANCEL_ALREADY, redis.call('HGET', KEYS[3], ARGV[1])} end
if o.status == ORDER_STATUS_EXPIRED then return {STORE_CANCEL_EXPIRED, redis.call('HGET', KEYS[3], ARGV[1])} end
if o.status == ORDER_STATUS_RESERVED then
  local due = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]) or '0')
  if due > 0 and now >= due then
    return {STORE_CANCEL_EXPIRED, order_end(ARGV[1], o, q, ORDER_STATUS_EXPIRED, now), 1}
  end
end
return {STORE_CANCEL_DONE, order_end(ARGV[1], o, q, ORDER_STATUS_CANCELLED, now)}
