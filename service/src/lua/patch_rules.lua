-- PATCH's merge of a SKU's sale rules (rules.h), in one step: the fields given replace the
-- meta's, the others stay; the merged rules are checked (sale_end after sale_start when both
-- are set) and written with a new rules version (rver: above the meta's and Redis's clock in
-- microseconds, next_id.lua, so that a failover losing this write cannot hand the same version
-- out again), or nothing is. Stock, layout and version are not touched. A damaged number
-- (version, segments, hwm, rver or a rule) fails it with nothing written. The caller then
-- raises every segment's rver key to the new version (rules_push.lua) before it answers:
-- docs/design.md "The sale rules' version".
-- KEYS: meta.  ARGV: limit, sale_start ms, sale_end ms, ttl s: each a canonical integer ("0":
-- none), or "" to keep the meta's; optionally a rules version the new one must pass (a
-- segment's, ahead of the meta: layout_note_rules_ahead).
-- -> {STORE_PATCH_OK, limit, sale_start, sale_end, ttl, rver, segments to push to} (the merged
--    rules, numbers; the segments [0, max(segments, hwm))) | {STORE_PATCH_NONE} no such SKU (or
--    deleted) | {STORE_PATCH_INVALID, sale_start, sale_end}
-- @include int.lua
local names = {'limit', 'sale_start', 'sale_end', 'ttl'}
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', names[1], names[2], names[3],
                    names[4], 'hwm', 'rver')
for i = 1, 8 do
  if m[i] and not int(m[i]) then return damaged(KEYS[1]) end
end
if not m[1] or not m[2] or int(m[2]) <= 0 then return {STORE_PATCH_NONE} end
local v = {}
for i = 1, 4 do
  local a = ARGV[i]
  if a ~= '' then
    if not int(a) or int(a) < 0 then
      return redis.error_reply('ERR patch_rules: ' .. names[i] .. ' is not a rule value')
    end
    v[i] = a
  else
    v[i] = m[i + 2] or '0'
  end
end
local s, e = int(v[2]), int(v[3])
if s > 0 and e > 0 and e <= s then return {STORE_PATCH_INVALID, s, e} end
local prev = math.max(int(m[8] or '0'), tonumber(ARGV[5] or '0') or 0)
-- @include next_id.lua
redis.call('HSET', KEYS[1], names[1], v[1], names[2], v[2], names[3], v[3], names[4], v[4],
           'rver', string.format('%.0f', nid))
local nseg = math.max(int(m[2]), int(m[7] or '0'))
return {STORE_PATCH_OK, int(v[1]), s, e, int(v[4]), string.format('%.0f', nid), nseg}
