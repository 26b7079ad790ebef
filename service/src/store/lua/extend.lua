-- Extends a hold (POST /api/v1/orders/{id}/extend): reserved and not yet due (the due set's
-- score, on this Redis's clock) -> its expiry moves later by the seconds asked, its count of
-- extensions goes up by one, in one step with the due set, the hold index and the order log. A
-- hold found due is expired here, in the same step (hold_end.lua, as confirm.lua does), so an
-- extension racing the sweeper (or a confirm, or a cancel) ends in exactly one of them and
-- every caller sees the same record. docs/design.md "Holds and their expiry".
-- The limits are the SKU's rules hold_extend_s and hold_extend_max (rules_table.h: meta fields
-- ext_s, ext_max): on one Redis read here from the SKU's meta (KEYS[10]), so a PATCH holds from
-- its answer; on a Redis Cluster (the meta is another slot) the caller reads them from the meta
-- just before and passes them with the meta's rules version, which must not be older than this
-- segment's (rver: a PATCH raises every segment's before it answers), else {.._RULES} and the
-- caller reads the meta again.
-- A multi-segment order's parts carry no expiry of their own (they follow their primary), so
-- only the primary's record moves; a part's own id is not an order: {STORE_EXTEND_NONE}.
-- KEYS: stock, cnt, orders, due, give, log, sver, follow, rver[, meta, the hold index] (both
-- on one Redis only).  ARGV: order id, "1" with the order log, seconds to add ("0": the rule's
-- hold_extend_s), then (a Redis Cluster) the meta's ext_s, ext_max and rver, else "", "", "";
-- then the segment's member in the hold index, "<sku>/<k>".
-- -> {code[, ...]}, code one of STORE_EXTEND_* (store_scripts.h): {DONE, record}; {NONE};
--    {CANCELLED, record}; {EXPIRED, record[, 1 when this call expired it]}; {NOT_RESERVED,
--    record}; {OFF}; {LIMIT, record, the most extensions}; {TOO_LONG, hold_extend_s};
--    {RULES, the segment's rules version}. An error (nothing written) when the record, the
--    segment or the meta is damaged. Nothing is written but for DONE and EXPIRED with its 1.
-- @include int.lua
-- @include now.lua
-- @include iso_time.lua
-- @include log.lua
local logging = ARGV[2] == '1'
-- @include hold_end.lua
local o, q = order_read(ARGV[1])
if not o then
  if q == 'none' then return {STORE_EXTEND_NONE} end
  return redis.error_reply('ERR order record or segment damaged')
end
if o.part_of ~= nil then return {STORE_EXTEND_NONE} end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if o.status == ORDER_STATUS_CANCELLED then return {STORE_EXTEND_CANCELLED, rec} end
if o.status == ORDER_STATUS_EXPIRED then return {STORE_EXTEND_EXPIRED, rec} end
if o.status ~= ORDER_STATUS_RESERVED then return {STORE_EXTEND_NOT_RESERVED, rec} end
-- >> the rules, before anything is written: a refused extension changes nothing
local ext_s, ext_max
if KEYS[10] then
  local m = redis.call('HMGET', KEYS[10], 'ext_s', 'ext_max')
  ext_s, ext_max = int(m[1] or '0'), int(m[2] or '0')
  if ext_s == nil or ext_max == nil then return damaged(KEYS[10]) end
else
  local rv = int(redis.call('GET', KEYS[9]) or '0')
  if rv == nil then return damaged(KEYS[9]) end
  if rv > tonumber(ARGV[6]) then return {STORE_EXTEND_RULES, rv} end
  ext_s, ext_max = tonumber(ARGV[4]), tonumber(ARGV[5])
end
if ext_s <= 0 then return {STORE_EXTEND_OFF} end
if ext_max <= 0 then ext_max = STORE_EXTEND_DEFAULT_MAX end
local secs = tonumber(ARGV[3])
if secs <= 0 then secs = ext_s end
if secs > ext_s then return {STORE_EXTEND_TOO_LONG, ext_s} end
local done = tonumber(o.extensions) or 0
if done >= ext_max then return {STORE_EXTEND_LIMIT, rec, ext_max} end
-- <<
local due = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]) or '0')
if due <= 0 then return redis.error_reply('ERR a hold without its expiry in the due set') end
if now >= due then
  return {STORE_EXTEND_EXPIRED, order_end(ARGV[1], o, q, ORDER_STATUS_EXPIRED, now), 1}
end
local exp = due + secs * 1000
o.expires_at = iso(exp)
o.extensions = done + 1
rec = cjson.encode(o)
redis.call('HSET', KEYS[3], ARGV[1], rec)
redis.call('ZADD', KEYS[4], exp, ARGV[1])
-- the hold index never names a time later than the segment's earliest hold: this hold moved
-- later, so the earliest can only have stayed or moved later too; LT keeps the index's turn
-- if it is sooner (the sweep then finds nothing due and sets the segment's next turn itself)
if KEYS[11] then
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  redis.call('ZADD', KEYS[11], 'LT', tonumber(first[2]), ARGV[7])
end
if logging then
  local tq, parts = q, nil
  if type(o.parts) == 'table' then
    tq = tonumber(o.quantity)
    parts = parts_text(o, tq)
  end
  log_extended(KEYS[6], ARGV[1], o.sku, tonumber(o.segment) or 0, o.user_id, tq, now,
               redis.call('GET', KEYS[7]) or '0', parts, exp, items_text(o))
else
  -- a change not logged is counted in cnt's u, for inventory-sink to backfill (issue 29)
  redis.call('HINCRBY', KEYS[2], 'u', 1)
end
return {STORE_EXTEND_DONE, rec}
