-- PATCH's merge of a SKU's sale rules (rules_table.h), in one step: the fields given replace
-- the meta's, the others stay; the merged rules are checked (sale_end after sale_start when both
-- are set) and written with a new rules version (rver: above the meta's and Redis's clock in
-- microseconds, next_id.lua, so that a failover losing this write cannot hand the same version
-- out again), or nothing is. Stock, layout and version are not touched. A damaged number
-- (version, segments, hwm, rver or a rule) fails it with nothing written. The caller then
-- raises every segment's rver key to the new version (rules_push.lua) before it answers:
-- docs/design.md "The sale rules' version".
-- KEYS: meta.  ARGV: a rules version the new one must pass ("0": none; a segment's, ahead of
-- the meta: layout_note_rules_ahead), then for each rule its meta field and its value: a
-- canonical integer ("0": none), or "" to keep the meta's; a field "$<f>" is a string rule
-- (rules_table.h STR: meta field f), its value "=<name>" ("=": none), or "" to keep it.
-- -> {STORE_PATCH_OK, rver, segments to push to, the merged rules in ARGV's order} (numbers;
--    the segments [0, max(segments, hwm))) | {STORE_PATCH_NONE} no such SKU (or deleted) |
--    {STORE_PATCH_INVALID, sale_start, sale_end}
-- The hold flag "holds" (docs/design.md "The sweeper") is set when the merged TTL is, and never
-- cleared here: holds placed before a PATCH to 0 must still expire ("1"; "l" in a layout an older
-- binary wrote (no flag, or "0" beside a TTL) whose TTL was or is set: its holds may exist).
-- @include int.lua
local names, str = {}, {}
for i = 2, #ARGV, 2 do
  local f = ARGV[i]
  if string.sub(f, 1, 1) == '$' then
    f = string.sub(f, 2)
    str[#names + 1] = true
  end
  names[#names + 1] = f
end
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'hwm', 'rver', unpack(names))
for i = 1, 4 + #names do
  if m[i] and not str[i - 4] and not int(m[i]) then return damaged(KEYS[1]) end
end
if not m[1] or not m[2] or int(m[2]) <= 0 then return {STORE_PATCH_NONE} end
local v, by = {}, {}
for i = 1, #names do
  local a = ARGV[2 * i + 1]
  if str[i] then
    if a ~= '' then v[i] = string.sub(a, 2) else v[i] = m[4 + i] or '' end
  elseif a ~= '' then
    if not int(a) or int(a) < 0 then
      return redis.error_reply('ERR patch_rules: ' .. names[i] .. ' is not a rule value')
    end
    v[i] = a
  else
    v[i] = m[4 + i] or '0'
  end
  if not str[i] then by[names[i]] = int(v[i]) end
end
-- the window's own check: its end after its start, in the merged rules
local s, e = by['sale_start'] or 0, by['sale_end'] or 0
if s > 0 and e > 0 and e <= s then return {STORE_PATCH_INVALID, s, e} end
local prev = math.max(int(m[4] or '0'), tonumber(ARGV[1]) or 0)
-- @include next_id.lua
local out = {STORE_PATCH_OK, string.format('%.0f', nid), math.max(int(m[2]), int(m[3] or '0'))}
local oldttl = 0
for i = 1, #names do
  if names[i] == 'ttl' then oldttl = int(m[4 + i] or '0') end
  redis.call('HSET', KEYS[1], names[i], v[i])
  if str[i] then out[#out + 1] = v[i] else out[#out + 1] = int(v[i]) end
end
redis.call('HSET', KEYS[1], 'rver', out[2])
local ttl = by['ttl'] or 0
local hf = redis.call('HGET', KEYS[1], 'holds')
-- none, or "0" beside a TTL: written by an older binary (its holds are not in the hold index)
if (not hf or hf == '0') and oldttl > 0 or not hf and ttl > 0 then
  redis.call('HSET', KEYS[1], 'holds', 'l')
elseif hf == '0' and ttl > 0 then
  redis.call('HSET', KEYS[1], 'holds', '1')
end
return out
