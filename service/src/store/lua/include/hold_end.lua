-- The end of a live order of a segment, as Lua local functions over the segment's keys
-- KEYS[1] stock, KEYS[2] cnt, KEYS[3] orders, KEYS[4] due, KEYS[5] give, KEYS[6] log, KEYS[7]
-- sver, KEYS[8] follow (cancel.lua, confirm.lua, expire.lua; each sets the local `logging`,
-- true with --order-log, before including this):
--   order_read(id) -> the record decoded and its units in this segment (units.lua: a
--     multi-segment order's primary holds its own part, docs/design.md "Orders larger than one
--     segment"), or nil, why (no record: 'none'; a record or a counter that is not what the
--     scripts write: 'damaged'), checking every number the end would change before anything is
--     written (a primary's parts too: each a segment and a quantity, summing to its quantity);
--   order_end(id, o, q, status, now) ends it: the record's status becomes status ('cancelled'
--     or 'expired'), its units go back to the stock, the counters go down (r too for a hold),
--     it leaves the due set, its user's give-back is queued in the give set (member: the id's
--     32 hex digits then the user id; drained by the sweeper into the SKU's per-user counts,
--     docs/design.md "Per-user limits"), its limit groups' give-backs (the record's "grp",
--     {"<group>": units}) queued in the segment's ggive set (member: the 32 hex digits, the
--     user id, "\x1f", the group; drained by the sweeper into each group's users hash,
--     docs/design.md "Limit groups"), a primary's other parts get the change queued in the
--     follow set (order_follow), and the change goes to the order log (log.lua). A part (a
--     record with part_of) gets no give-back and no log entry: its primary has them.
--     Returns the new record text.
--   order_follow(id, o, status, now): for a primary, ZADD follow now "<part id>|<status>" for
--     each of its parts in another segment (part_follow.lua applies them there); for a cart's
--     primary (a record with items, docs/design.md "Ending and healing a cart"), for every part
--     of every item but its own, the part id naming the part's own SKU ("<hex>-<k>-<sku>");
--   order_logged(id, o, q, event, now): the order log's entry of a change (when logging); a
--     primary's carries the order's total and the field parts "k:q,k:q,...", a cart's primary
--     (a record with items) also the field items (log.lua items_text, built from the record).
--     Without the log the change is counted in cnt's u instead (inventory-sink backfills from
--     the record).
-- Needs int.lua and log.lua (parts_text, items_text, log_event).
-- @include units.lua
-- a cart's items (docs/design.md "Ending and healing a cart"): the home item first, the
-- record's own SKU, quantity and parts; every item a SKU, its units and parts summing to them;
-- distinct SKUs. False for anything else: the end would queue follows to parts it cannot name.
local function items_ok(o, total)
  if type(o.items) ~= 'table' or #o.items < 1 then return false end
  local seen = {}
  for i, it in ipairs(o.items) do
    if type(it) ~= 'table' or type(it.sku) ~= 'string' or #it.sku < 1 or
       not string.match(it.sku, '^[%w_.:%-]+$') or seen[it.sku] then
      return false
    end
    seen[it.sku] = true
    local q = tonumber(it.quantity)
    if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) or not parts_text(it, q) then
      return false
    end
    if i == 1 and (it.sku ~= o.sku or q ~= total or
                   parts_text(it, q) ~= parts_text(o, total)) then
      return false
    end
  end
  return true
end
local function order_read(id)
  local rec = redis.call('HGET', KEYS[3], id)
  if not rec then return nil, 'none' end
  local ok, o = pcall(cjson.decode, rec)
  if not ok or type(o) ~= 'table' then return nil, 'damaged' end
  local total = tonumber(o.quantity)
  if total == nil or total < 1 or total > 1e15 or total ~= math.floor(total) then
    return nil, 'damaged'
  end
  if o.parts ~= nil or o.items ~= nil then
    if type(o.sku) ~= 'string' or not string.match(id, '^%x+%-') or
       not parts_text(o, total) or (o.items ~= nil and not items_ok(o, total)) then
      return nil, 'damaged'
    end
    local t = redis.call('TYPE', KEYS[8])
    t = type(t) == 'table' and t.ok or t
    if t ~= 'zset' and t ~= 'none' then return nil, 'damaged' end
  end
  local q = units(o)
  if q == nil or q < 1 or q > total or q ~= math.floor(q) then return nil, 'damaged' end
  if o.status == ORDER_STATUS_CANCELLED or o.status == ORDER_STATUS_EXPIRED then return o, q end
  local n = int(redis.call('GET', KEYS[1]) or '')
  local c = redis.call('HMGET', KEYS[2], 's', 'o', 'r')
  local s, cnt, r = int(c[1] or ''), int(c[2] or ''), int(c[3] or '0')
  if n == nil or s == nil or cnt == nil or r == nil or s < q or
     (o.part_of == nil and cnt < 1) or (o.status == ORDER_STATUS_RESERVED and r < q) then
    return nil, 'damaged'
  end
  -- the log entry carries sver: one the scripts did not write would reach the sink malformed
  if logging and o.part_of == nil and int(redis.call('GET', KEYS[7]) or '0') == nil then
    return nil, 'damaged'
  end
  -- a cart's entries carry its items (log.lua items_text): items it cannot spell are damaged
  if logging and o.part_of == nil and o.items ~= nil and not items_text(o) then
    return nil, 'damaged'
  end
  return o, q
end
local function order_logged(id, o, q, ev, now)
  if o.part_of ~= nil then return end
  if not logging then
    -- a change not logged is counted in cnt's u, for inventory-sink to backfill (issue 29)
    redis.call('HINCRBY', KEYS[2], 'u', 1)
    return
  end
  local parts = nil
  if type(o.parts) == 'table' then
    q = tonumber(o.quantity)
    parts = parts_text(o, q)
  end
  -- a cart's primary: every entry carries the cart's items as its commit's did (items_text)
  log_event(KEYS[6], ev, id, o.sku, tonumber(o.segment) or 0, o.user_id, q, now,
            redis.call('GET', KEYS[7]) or '0', parts, items_text(o))
end
local function order_follow(id, o, status, now)
  if type(o.parts) ~= 'table' then return end
  local hex = string.match(id, '^(%x+)%-')
  if type(o.items) == 'table' then
    -- a cart: every part of every item lives in its own SKU's segment (on a cluster, perhaps
    -- another master): the member names it; follow_async parses the SKU from the id
    for _, it in ipairs(o.items) do
      for _, p in ipairs(it.parts) do
        local k = tonumber(p.segment)
        if it.sku ~= o.sku or k ~= tonumber(o.segment) then
          redis.call('ZADD', KEYS[8], now, string.format('%s-%d-%s|%s', hex, k, it.sku, status))
        end
      end
    end
    return
  end
  for _, p in ipairs(o.parts) do
    local k = tonumber(p.segment)
    if k ~= tonumber(o.segment) then
      redis.call('ZADD', KEYS[8], now, string.format('%s-%d-%s|%s', hex, k, o.sku, status))
    end
  end
end
local function order_end(id, o, q, status, now)
  local held = o.status == ORDER_STATUS_RESERVED
  o.status = status
  local rec = cjson.encode(o)
  redis.call('HSET', KEYS[3], id, rec)
  redis.call('INCRBY', KEYS[1], q)
  redis.call('HINCRBY', KEYS[2], 's', -q)
  if o.part_of == nil then redis.call('HINCRBY', KEYS[2], 'o', -1) end -- o counts orders
  if held then
    redis.call('HINCRBY', KEYS[2], 'r', -q)
    redis.call('ZREM', KEYS[4], id)
  end
  if o.part_of == nil and type(o.user_id) == 'string' then
    redis.call('ZADD', KEYS[5], now, string.sub(id, 1, 32) .. o.user_id)
    if type(o.grp) == 'table' then
      -- the ggive set: the give key's name with "ggive" for "give", so the same slot ({S/k})
      -- and no KEYS of its own for every script that includes this file
      local gg = string.gsub(KEYS[5], 'give$', 'ggive')
      for g, _ in pairs(o.grp) do
        if type(g) == 'string' then
          redis.call('ZADD', gg, now, string.sub(id, 1, 32) .. o.user_id .. '\031' .. g)
        end
      end
    end
  end
  order_follow(id, o, status, now)
  order_logged(id, o, q, status, now)
  return rec
end
