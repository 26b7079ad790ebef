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
--     each of its parts in another segment (part_follow.lua applies them there);
--   order_logged(id, o, q, event, now): the order log's entry of a change (when logging); a
--     primary's carries the order's total and the field parts "k:q,k:q,...". Without the log
--     the change is counted in cnt's u instead (inventory-sink backfills from the record).
-- Needs int.lua and log.lua.
-- @include units.lua
local function parts_text(o, total)
  if type(o.parts) ~= 'table' or #o.parts < 1 then return nil end
  local out, sum = {}, 0
  for _, p in ipairs(o.parts) do
    if type(p) ~= 'table' then return nil end
    local k, q = tonumber(p.segment), tonumber(p.quantity)
    if k == nil or q == nil or k < 0 or k >= STORE_SEGMENTS_MAX or k ~= math.floor(k) or
       q < 1 or q > 1e15 or q ~= math.floor(q) then
      return nil
    end
    sum = sum + q
    out[#out + 1] = string.format('%d:%d', k, q)
  end
  if sum ~= total then return nil end
  return table.concat(out, ',')
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
  if o.parts ~= nil then
    if type(o.sku) ~= 'string' or not string.match(id, '^%x+%-') or
       not parts_text(o, total) then
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
  log_event(KEYS[6], ev, id, o.sku, tonumber(o.segment) or 0, o.user_id, q, now,
            redis.call('GET', KEYS[7]) or '0', parts)
end
local function order_follow(id, o, status, now)
  if type(o.parts) ~= 'table' then return end
  local hex = string.match(id, '^(%x+)%-')
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
