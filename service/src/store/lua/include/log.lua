-- The order log (orderlog.h): log_event(key, event, id, sku, segment, user, units, at, version
-- [, parts]) appends one entry to the segment's stream, in the script that makes the change, so
-- the log and the stock never disagree. parts (a multi-segment order's primary: "k:q,k:q,...",
-- units then being the order's total) adds the entry's `parts` field; nil or "" adds none. A
-- script calls it only when the log is on (--order-log).
local function log_event(key, ev, id, sku, seg, user, q, at, ver, parts)
  if type(user) ~= 'string' then user = '' end
  if type(parts) == 'string' and parts ~= '' then
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
-- log_extended(key, id, sku, seg, user, q, at, ver, parts, expires): the entry of a hold's
-- extension (extend.lua): event "extended" with log_event's fields, and `expires`, the hold's
-- new expiry (Redis ms, decimal), which inventory-sink writes into the order's expires_at.
local function log_extended(key, id, sku, seg, user, q, at, ver, parts, expires)
  if type(user) ~= 'string' then user = '' end
  local f = {'event', 'extended', 'order', id, 'sku', sku, 'segment', string.format('%d', seg),
             'user', user, 'quantity', string.format('%d', q), 'at', string.format('%.0f', at),
             'version', ver, 'expires', string.format('%.0f', expires)}
  if type(parts) == 'string' and parts ~= '' then
    f[#f + 1] = 'parts'
    f[#f + 1] = parts
  end
  redis.call('XADD', key, '*', unpack(f))
end
