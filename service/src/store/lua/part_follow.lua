-- A multi-segment order's part takes its primary's change (docs/design.md "Orders larger than
-- one segment"), on the part's segment: to cancelled or expired from created, reserved or
-- confirmed: its units back to the stock, s down (r too when it was reserved; o counts orders,
-- never parts); from
-- reserved to confirmed: r down. A part already cancelled or expired is left alone, and so is
-- one already at the status or one that cannot take it (a created part asked to be
-- confirmed): so running it twice, or a confirm's follow after a cancel's, changes nothing
-- more. Parts have no user, no due-set entry and no log entry: their primary has them.
-- KEYS: stock, cnt, orders.  ARGV: the part's id, the status (cancelled, expired, confirmed).
-- -> {STORE_FOLLOW_*}; an error (nothing written) for a record without part_of (not a part), a
--    status not one of the three, or a damaged record or counter
-- @include int.lua
-- @include units.lua
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
local held = o.status == ORDER_STATUS_RESERVED
o.status = to
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(o))
if held then redis.call('HINCRBY', KEYS[2], 'r', -q) end
if to ~= ORDER_STATUS_CONFIRMED then
  redis.call('INCRBY', KEYS[1], q)
  redis.call('HINCRBY', KEYS[2], 's', -q)
end
return {STORE_FOLLOW_DONE}
