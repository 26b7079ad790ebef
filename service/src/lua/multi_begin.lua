-- The intent of a multi-segment order (docs/design.md "Orders larger than one segment"),
-- written on the SKU's slot before its first part: whoever finds it past its deadline rolls
-- the order forward (its primary record exists) or back (part_undo.lua on every part).
-- KEYS: multi.  ARGV: the order's hex, its id, its parts "k:q,k:q,..." (index order), the
-- request's remaining budget in ms.
-- -> {deadline, now} (Redis ms): no part may be committed after the deadline
-- @include time_ms.lua
local now = time_ms()
local d = now + tonumber(ARGV[4])
local parts = {}
for k, q in string.gmatch(ARGV[3], '(%d+):(%d+)') do
  parts[#parts + 1] = {tonumber(k), tonumber(q)}
end
redis.call('HSET', KEYS[1], ARGV[1],
           cjson.encode({order = ARGV[2], parts = parts, deadline = d}))
return {d, now}
