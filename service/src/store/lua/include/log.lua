-- The order log (orderlog.h): log_event(key, event, id, sku, segment, user, units, at, version
-- [, parts[, items]]) appends one entry to the segment's stream, in the script that makes the
-- change, so the log and the stock never disagree. parts (a multi-segment order's primary:
-- "k:q,k:q,...", units then being the order's total) adds the entry's `parts` field; nil or ""
-- adds none. items (a cart's primary, docs/design.md "The order log": "<sku>:<k>:<q>,..." for
-- every part of every item, home item first) adds the field `items` after it; nil or "" adds
-- none, so a single-SKU order's entry is what it always was. A script calls it only when the
-- log is on (--order-log).
local function log_event(key, ev, id, sku, seg, user, q, at, ver, parts, items)
  if type(user) ~= 'string' then user = '' end
  if type(parts) == 'string' and parts ~= '' then
    if type(items) == 'string' and items ~= '' then
      redis.call('XADD', key, '*', 'event', ev, 'order', id, 'sku', sku,
                 'segment', string.format('%d', seg), 'user', user,
                 'quantity', string.format('%d', q), 'at', string.format('%.0f', at),
                 'version', ver, 'parts', parts, 'items', items)
      return
    end
    redis.call('XADD', key, '*', 'event', ev, 'order', id, 'sku', sku,
               'segment', string.format('%d', seg), 'user', user,
               'quantity', string.format('%d', q), 'at', string.format('%.0f', at),
               'version', ver, 'parts', parts)
    return
  end
  redis.call('XADD', key, '*', 'event', ev, 'order', id, 'sku', sku,
             'segment', string.format('%d', seg), 'user', user,
             'quantity', string.format('%d', q), 'at', string.format('%.0f', at),
             'version', ver)
end
-- log_extended(key, id, sku, seg, user, q, at, ver, parts, expires[, items]): the entry of a
-- hold's extension (extend.lua): event "extended" with log_event's fields (items: a cart's, as
-- log_event's), and `expires`, the hold's new expiry (Redis ms, decimal), which inventory-sink
-- writes into the order's expires_at.
local function log_extended(key, id, sku, seg, user, q, at, ver, parts, expires, items)
  if type(user) ~= 'string' then user = '' end
  local f = {'event', 'extended', 'order', id, 'sku', sku, 'segment', string.format('%d', seg),
             'user', user, 'quantity', string.format('%d', q), 'at', string.format('%.0f', at),
             'version', ver, 'expires', string.format('%.0f', expires)}
  if type(parts) == 'string' and parts ~= '' then
    f[#f + 1] = 'parts'
    f[#f + 1] = parts
    if type(items) == 'string' and items ~= '' then
      f[#f + 1] = 'items'
      f[#f + 1] = items
    end
  end
  redis.call('XADD', key, '*', unpack(f))
end
-- parts_text(o, total[, sku]): a record's (or a cart item's) parts, o.parts
-- ([{"segment","quantity"},...]), as the order log spells them: "k:q,k:q,..." in their order,
-- or with sku "<sku>:k:q,..." (a cart's items field); nil unless every part is a segment and a
-- quantity as the scripts write them, summing to total. The one check of a parts list: the ends
-- (hold_end.lua) and the cart's items below read parts through it.
local function parts_text(o, total, sku)
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
    out[#out + 1] = sku and string.format('%s:%d:%d', sku, k, q) or string.format('%d:%d', k, q)
  end
  if sum ~= total then return nil end
  return table.concat(out, ',')
end
-- items_text(o): the `items` field of a cart's entries, from its primary record's items
-- ([{"sku","quantity","parts":[{"segment","quantity"},...]},...], home item first):
-- "<sku>:<k>:<q>,..." for every part of every item in the record's order (the text the commit
-- was given, orderlog_items_add). nil when the record has no items (not a cart) or they are not
-- what the scripts write (the caller refuses the record as damaged: the entry would reach the
-- sink malformed). Every entry of a cart after its commit (cancelled, expired, confirmed,
-- extended) is built by this one function.
local function items_text(o)
  if type(o.items) ~= 'table' or #o.items < 1 then return nil end
  local out = {}
  for _, it in ipairs(o.items) do
    if type(it) ~= 'table' or type(it.sku) ~= 'string' or it.sku == '' or
       string.find(it.sku, '[,%s]') then
      return nil
    end
    local t = parts_text(it, tonumber(it.quantity), it.sku)
    if not t then return nil end
    out[#out + 1] = t
  end
  return table.concat(out, ',')
end
