-- The intent of a multi-segment order (docs/design.md "Orders larger than one segment"),
-- written on the SKU's slot before its first part: whoever finds it past its deadline rolls
-- the order forward (its primary record exists) or back (part_undo.lua on every part). Written
-- only while the SKU is still at the order's layout version: a PUT or DELETE deletes the
-- intents of the layout it replaces, and one written after it by an order of the old layout
-- (a PUT down to one segment, whose SKU the healer no longer looks at) would stay for good.
-- KEYS: multi, meta.  ARGV: the order's hex, its id, its parts "k:q,k:q,..." (index order), the
-- request's remaining budget in ms, the order's layout version.
-- -> {deadline, now} (Redis ms): no part may be committed after the deadline;
--    {-1, version}: the SKU is at another version (nothing written: read the layout again)
-- @include time_ms.lua
local v = redis.call('HGET', KEYS[2], 'version')
if v ~= ARGV[5] then return {-1, tonumber(v or '0') or 0} end
local now = time_ms()
local d = now + tonumber(ARGV[4])
local parts = {}
for k, q in string.gmatch(ARGV[3], '(%d+):(%d+)') do
  parts[#parts + 1] = {tonumber(k), tonumber(q)}
end
redis.call('HSET', KEYS[1], ARGV[1],
           cjson.encode({order = ARGV[2], parts = parts, deadline = d}))
return {d, now}
