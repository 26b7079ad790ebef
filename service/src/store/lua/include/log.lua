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
