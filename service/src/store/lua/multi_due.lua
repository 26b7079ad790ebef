-- The intents of multi-segment orders and of carts (docs/design.md "Orders larger than one
-- segment", "Ending and healing a cart") that are past their deadline + a margin on this
-- Redis's clock: their requests are done committing (the margin spares one on a master whose
-- clock is behind; a late commit is refused anyway by the tombstones part_undo.lua leaves), so
-- the sweeper heals each one (forward when the primary exists, else back). Reads only. An
-- intent that is not what its writer writes is returned too (the caller logs it and leaves it).
-- KEYS: multi[, cart] (both in the SKU's slot).  ARGV: margin ms, most intents to return (of
-- both hashes together).
-- -> {cart intents (all, due or not), m, hex, intent JSON, ... (m multi-segment intents), hex,
--    intent JSON, ... (the due cart intents)}: the first number lets the sweeper keep looking
--    at a deleted home SKU while its carts' intents are left
-- @include time_ms.lua
local now = time_ms()
local margin, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local function due(key, r)
  local t = redis.call('TYPE', key)
  t = type(t) == 'table' and t.ok or t
  if t ~= 'hash' then return 0 end
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if #r >= 2 * most + 2 then break end
    local ok, v = pcall(cjson.decode, all[i + 1])
    local d = ok and type(v) == 'table' and tonumber(v.deadline) or nil
    if d == nil or d + margin < now then
      r[#r + 1] = all[i]
      r[#r + 1] = all[i + 1]
    end
  end
  return #all / 2
end
local r = {0, 0}
due(KEYS[1], r)
r[2] = (#r - 2) / 2
if KEYS[2] then r[1] = due(KEYS[2], r) end
return r
