-- PATCH's merge of a SKU's sale rules (rules.h), in one step: the fields given replace the
-- meta's, the others stay; the merged rules are checked (sale_end after sale_start when both
-- are set) and written, or nothing is. Stock, layout and version are not touched. A damaged
-- number (version, segments or a rule) fails it with nothing written.
-- The hold flag "holds" (docs/design.md "The sweeper") is set when the merged TTL is, and never
-- cleared here: holds placed before a PATCH to 0 must still expire ("1"; "l" in a layout an older
-- binary wrote (no flag, or "0" beside a TTL) whose TTL was or is set: its holds may exist).
-- KEYS: meta.  ARGV: limit, sale_start ms, sale_end ms, ttl s: each a canonical integer ("0":
-- none), or "" to keep the meta's.
-- -> {STORE_PATCH_OK, limit, sale_start, sale_end, ttl} (the merged rules, numbers) |
--    {STORE_PATCH_NONE} no such SKU (or deleted) | {STORE_PATCH_INVALID, sale_start, sale_end}
-- @include int.lua
local names = {'limit', 'sale_start', 'sale_end', 'ttl'}
local m = redis.call('HMGET', KEYS[1], 'version', 'segments', names[1], names[2], names[3],
                    names[4])
for i = 1, 6 do
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
redis.call('HSET', KEYS[1], names[1], v[1], names[2], v[2], names[3], v[3], names[4], v[4])
local hf = redis.call('HGET', KEYS[1], 'holds')
-- none, or "0" beside a TTL: written by an older binary (its holds are not in the hold index)
if (not hf or hf == '0') and int(m[6] or '0') > 0 or not hf and int(v[4]) > 0 then
  redis.call('HSET', KEYS[1], 'holds', 'l')
elseif hf == '0' and int(v[4]) > 0 then
  redis.call('HSET', KEYS[1], 'holds', '1')
end
return {STORE_PATCH_OK, int(v[1]), s, e, int(v[4])}
