-- inventory-sink: forgets the order log of a segment that is no longer in its SKU's layout, once
-- every consumer group has drained it (docs/design.md "Streams found and dropped"). In one step
-- on the segment's slot: a segment with a stock key is live (a newer layout brought it back:
-- its log is followed as any other), and a dead one cannot get new entries (its orders went
-- with the drop), so a log found drained here stays drained.
-- KEYS: log, stock.  -> 'live' | 'gone' (no log) | 'busy' (entries not yet acknowledged by
-- every group, or no group yet) | 'dropped'
if redis.call('EXISTS', KEYS[2]) == 1 then return 'live' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'gone' end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then return 'busy' end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local function after(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  if #am ~= #bm then return #am > #bm end
  if am ~= bm then return am > bm end
  if #as ~= #bs then return #as > #bs end
  return as >= bs
end
for _, g in ipairs(groups) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  if tonumber(f['pending']) ~= 0 then return 'busy' end
  if #last > 0 and not after(f['last-delivered-id'], last[1][1]) then return 'busy' end
end
redis.call('DEL', KEYS[1])
return 'dropped'
