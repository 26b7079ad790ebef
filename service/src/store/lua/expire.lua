-- The expiry sweep of one segment: every hold whose expiry (the due set's score) has come, at
-- most ARGV[1] of them, expires now (hold_end.lua: units back, counters down, give-back queued,
-- a multi-segment order's other parts queued in follow). Any instance may run it at any time,
-- any number of times: a hold expires once, since it leaves the due set in the step that
-- expires it. A part of a multi-segment order is never in the due set (its primary is): one
-- found there only leaves it.
-- KEYS: stock, cnt, orders, due, give, log, sver, follow[, the hold index].  ARGV: most holds
-- to expire, most give-backs to return, "1" with the order log, most follows to return[, the
-- segment's member in the hold index, "<sku>/<k>"]. With the hold index (one Redis: store.h
-- store_holds_key), the segment's turn there is set to its next hold's expiry in this same
-- step, or the segment leaves the index when it has no hold left: the index never says later
-- than the segment's earliest hold (the commit of a hold only lowers it).
-- -> {expired, damaged, now, next due (Redis ms, 0: none), give-backs queued, follows queued,
--    give-backs returned (g), member, ... (g of them), follow member, ...}: the first give-backs
--    of the queue (oldest first) for the caller to apply (sweep.h, giveback_async), then the
--    first follows queued in this segment ("<part id>|<status>", oldest first) for the caller
--    to apply (sweep.h, follow_async)
-- @include int.lua
-- @include now.lua
-- @include log.lua
local logging = ARGV[3] == '1'
-- @include hold_end.lua
local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local expired, bad = 0, 0
for _, id in ipairs(ids) do
  local o, q = order_read(id)
  if not o then
    if q == 'none' then redis.call('ZREM', KEYS[4], id) else bad = bad + 1 end
  elseif o.status ~= ORDER_STATUS_RESERVED or o.part_of ~= nil then
    redis.call('ZREM', KEYS[4], id)
  else
    order_end(id, o, q, ORDER_STATUS_EXPIRED, now)
    expired = expired + 1
  end
end
local nxt = 0
local first = redis.call('ZRANGE', KEYS[4], bad, bad, 'WITHSCORES')
if first[2] then nxt = tonumber(first[2]) end
if KEYS[9] then
  if nxt > 0 then redis.call('ZADD', KEYS[9], nxt, ARGV[5])
  else redis.call('ZREM', KEYS[9], ARGV[5]) end
end
local give = redis.call('ZRANGE', KEYS[5], 0, tonumber(ARGV[2]) - 1)
local follow = {}
local ft = redis.call('TYPE', KEYS[8])
ft = type(ft) == 'table' and ft.ok or ft
if ft == 'zset' then follow = redis.call('ZRANGE', KEYS[8], 0, tonumber(ARGV[4]) - 1) end
local r = {expired, bad, now, nxt, redis.call('ZCARD', KEYS[5]),
           ft == 'zset' and redis.call('ZCARD', KEYS[8]) or 0, #give}
for _, m in ipairs(give) do r[#r + 1] = m end
for _, m in ipairs(follow) do r[#r + 1] = m end
return r
