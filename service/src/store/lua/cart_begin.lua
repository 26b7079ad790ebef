-- The intent of a cart (docs/design.md "Carts (SPEC §17)"), written on the home SKU's slot
-- before any part of any item: whoever finds it past its deadline rolls the cart forward (its
-- primary record exists) or back (part_undo.lua on every part, each in its own SKU's segment).
-- Kept in inv:2:{home}:cart, which a PUT or DELETE of the home SKU leaves alone (the parts in
-- other SKUs do not go with the home SKU's layout). Written only while the home SKU is still at
-- the cart's layout version (the other items' versions are checked by their own fenced part
-- commits, which refuse another version).
-- KEYS: cart (the home SKU's cart hash), meta (the home SKU's).
-- ARGV: the cart's hex, its id, its parts "k:q:sku,..." (every part of every item, the primary's
-- included), the request's remaining budget in ms, the home SKU's layout version, "1" when the
-- cart is a hold (the home SKU's hold flag is then set, so a Redis Cluster's sweeper looks at
-- the home SKU for its expiry even when its own rules have no TTL).
-- -> {deadline, now} (Redis ms): no part may be committed after the deadline;
--    {-1, version}: the home SKU is at another version (nothing written: read the layout again)
-- @include time_ms.lua
local v = redis.call('HGET', KEYS[2], 'version')
if v ~= ARGV[5] then return {-1, tonumber(v or '0') or 0} end
local now = time_ms()
local d = now + tonumber(ARGV[4])
local parts = {}
for k, q, sku in string.gmatch(ARGV[3], '(%d+):(%d+):([^,]+)') do
  parts[#parts + 1] = {tonumber(k), tonumber(q), sku}
end
if ARGV[6] == '1' then
  local hf = redis.call('HGET', KEYS[2], 'holds')
  if hf ~= '1' and hf ~= 'l' then redis.call('HSET', KEYS[2], 'holds', '1') end
end
redis.call('HSET', KEYS[1], ARGV[1],
           cjson.encode({order = ARGV[2], parts = parts, deadline = d}))
return {d, now}
