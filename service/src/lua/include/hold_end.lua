-- The end of a live order of a segment, as Lua local functions over the segment's keys
-- KEYS[1] stock, KEYS[2] cnt, KEYS[3] orders, KEYS[4] due, KEYS[5] give, KEYS[6] log, KEYS[7]
-- sver (cancel.lua, confirm.lua, expire.lua; each sets the local `logging`, true with
-- --order-log, before including this):
--   order_read(id) -> the record decoded and its quantity, or nil, why (no record: 'none';
--     a record or a counter that is not what the scripts write: 'damaged'), checking every
--     number the end would change before anything is written;
--   order_end(id, o, status) ends it: the record's status becomes status ('cancelled' or
--     'expired'), its units go back to the stock, the counters go down (r too for a hold), it
--     leaves the due set, and its user's give-back is queued in the give set (member: the id's
--     32 hex digits then the user id; drained by the sweeper into the SKU's per-user counts,
--     docs/design.md "Per-user limits"), and the change goes to the order log (log.lua).
--     Returns the new record text.
--   order_logged(id, o, q, event, now): the order log's entry of a change (when logging).
-- Needs int.lua and log.lua.
local function order_read(id)
  local rec = redis.call('HGET', KEYS[3], id)
  if not rec then return nil, 'none' end
  local ok, o = pcall(cjson.decode, rec)
  if not ok or type(o) ~= 'table' then return nil, 'damaged' end
  local q = tonumber(o.quantity)
  if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) then return nil, 'damaged' end
  if o.status == 'cancelled' or o.status == 'expired' then return o, q end
  local n = int(redis.call('GET', KEYS[1]) or '')
  local c = redis.call('HMGET', KEYS[2], 's', 'o', 'r')
  local s, cnt, r = int(c[1] or ''), int(c[2] or ''), int(c[3] or '0')
  if n == nil or s == nil or cnt == nil or r == nil or s < q or cnt < 1 or
     (o.status == 'reserved' and r < q) then
    return nil, 'damaged'
  end
  return o, q
end
local function order_logged(id, o, q, ev, now)
  if logging then
    log_event(KEYS[6], ev, id, o.sku, tonumber(o.segment) or 0, o.user_id, q, now,
              redis.call('GET', KEYS[7]) or '0')
  end
end
local function order_end(id, o, q, status, now)
  local held = o.status == 'reserved'
  o.status = status
  local rec = cjson.encode(o)
  redis.call('HSET', KEYS[3], id, rec)
  redis.call('INCRBY', KEYS[1], q)
  redis.call('HINCRBY', KEYS[2], 's', -q)
  redis.call('HINCRBY', KEYS[2], 'o', -1)
  if held then
    redis.call('HINCRBY', KEYS[2], 'r', -q)
    redis.call('ZREM', KEYS[4], id)
  end
  if type(o.user_id) == 'string' then
    redis.call('ZADD', KEYS[5], now, string.sub(id, 1, 32) .. o.user_id)
  end
  order_logged(id, o, q, status, now)
  return rec
end
