-- A multi-segment order's part takes its primary's change (docs/design.md "Orders larger than
-- one segment"), on the part's segment: to cancelled or expired from created, reserved or
-- confirmed: its units back to the stock, s down (r too when it was reserved; o counts orders,
-- never parts); from
-- reserved to confirmed: r down. A part already cancelled or expired is left alone, and so is
-- one already at the status or one that cannot take it (a created part asked to be
-- confirmed): so running it twice, or a confirm's follow after a cancel's, changes nothing
-- more. Parts have no due-set entry and no log entry: their primary has them. A cart's part
-- that is the first part of an item whose SKU has a per-user limit carries the user ("user")
-- and "lim": 1 (docs/design.md "Ending and healing a cart"): its SKU's count holds the item's
-- units, so when it goes to cancelled or expired its give-back is queued in its own segment's
-- give set (KEYS[4]; member as hold_end.lua's, the id's 32 hex digits then the user) in this
-- same step: the step that ends the part is the only one, so the count drops exactly once.
-- KEYS: stock, cnt, orders[, give].  ARGV: the part's id, the status (cancelled, expired,
-- confirmed).
-- -> {STORE_FOLLOW_*[, the give-back's member when one was queued]}; an error (nothing
--    written) for a record without part_of (not a part), a status not one of the three, or a
--    damaged record or counter
-- @include int.lua
-- @include units.lua
-- @include time_ms.lua
local to = ARGV[2]
if to ~= ORDER_STATUS_CANCELLED and to ~= ORDER_STATUS_EXPIRED and to ~= ORDER_STATUS_CONFIRMED then
  return redis.error_reply('ERR part_follow: status must be cancelled, expired or confirmed')
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then return {STORE_FOLLOW_NONE} end
local ok, o = pcall(cjson.decode, rec)
if not ok or type(o) ~= 'table' then return redis.error_reply('ERR part record damaged') end
if o.part_of == nil then
  return redis.error_reply('ERR part_follow: ' .. ARGV[1] .. ' is not a part (no part_of)')
end
if o.status == ORDER_STATUS_CANCELLED or o.status == ORDER_STATUS_EXPIRED then return {STORE_FOLLOW_LEFT} end
if to == ORDER_STATUS_CONFIRMED and o.status ~= ORDER_STATUS_RESERVED then return {STORE_FOLLOW_LEFT} end
if o.status ~= ORDER_STATUS_CREATED and o.status ~= ORDER_STATUS_RESERVED and o.status ~= ORDER_STATUS_CONFIRMED then
  return redis.error_reply('ERR part record damaged')
end
local q = units(o)
if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) then
  return redis.error_reply('ERR part record damaged')
end
local n = int(redis.call('GET', KEYS[1]) or '')
local c = redis.call('HMGET', KEYS[2], 's', 'o', 'r')
local s, cnt, r = int(c[1] or ''), int(c[2] or ''), int(c[3] or '0')
if n == nil or s == nil or cnt == nil or r == nil or s < q or
   (o.status == ORDER_STATUS_RESERVED and r < q) then
  return redis.error_reply('ERR part segment damaged: ' .. KEYS[2])
end
local give = nil
if to ~= ORDER_STATUS_CONFIRMED and o.lim ~= nil then
  if o.lim ~= 1 or type(o.user) ~= 'string' or #o.user < 1 or not KEYS[4] or
     not string.match(ARGV[1], '^%x+%-') or #string.match(ARGV[1], '^(%x+)%-') ~= 32 then
    return redis.error_reply('ERR part record damaged')
  end
  local t = redis.call('TYPE', KEYS[4])
  t = type(t) == 'table' and t.ok or t
  if t ~= 'zset' and t ~= 'none' then return redis.error_reply('ERR part segment damaged: ' .. KEYS[4]) end
  give = string.sub(ARGV[1], 1, 32) .. o.user
end
local held = o.status == ORDER_STATUS_RESERVED
o.status = to
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(o))
if held then redis.call('HINCRBY', KEYS[2], 'r', -q) end
if to ~= ORDER_STATUS_CONFIRMED then
  redis.call('INCRBY', KEYS[1], q)
  redis.call('HINCRBY', KEYS[2], 's', -q)
end
if give then
  redis.call('ZADD', KEYS[4], time_ms(), give)
  return {STORE_FOLLOW_DONE, give}
end
return {STORE_FOLLOW_DONE}
