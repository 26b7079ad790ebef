-- The intents of multi-segment orders (docs/design.md "Orders larger than one segment") that
-- are past their deadline + a margin on this Redis's clock: their requests are done committing
-- (the margin spares one on a master whose clock is behind; a late commit is refused anyway by
-- the tombstones part_undo.lua leaves), so the sweeper heals each one (forward when the primary
-- exists, else back). Reads
-- only. An intent that is not what multi_begin.lua writes is returned too (the caller logs it
-- and leaves it).
-- KEYS: multi.  ARGV: margin ms, most intents to return.
-- -> {hex, intent JSON, ...}
-- @include time_ms.lua
local t = redis.call('TYPE', KEYS[1])
t = type(t) == 'table' and t.ok or t
if t ~= 'hash' then return {} end
local now = time_ms()
local margin, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local r = {}
for i = 1, #all, 2 do
  if #r >= 2 * most then break end
  local ok, v = pcall(cjson.decode, all[i + 1])
  local d = ok and type(v) == 'table' and tonumber(v.deadline) or nil
  if d == nil or d + margin < now then
    r[#r + 1] = all[i]
    r[#r + 1] = all[i + 1]
  end
end
return r
