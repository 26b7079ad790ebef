-- A SKU's whole status in one step, for the status snapshot (statsnap.c, SPEC §15): its layout
-- and every segment's counters read at one moment. One Redis only: the keys span the SKU's
-- slot and every segment's (on a cluster the snapshot reads the layout, then each master's
-- segments, as the exact read does).
-- KEYS: meta, rst, then stock, sver, cnt of segments 0..n-1 (n: the segment count the caller
-- expects).  ARGV: the sale rules' meta fields (as lua/layout_read.lua).
-- -> {layout} when the layout is not n segments, settled (state not "p", no pending restock)
-- and on every segment (a segment at another version): the caller reads the slow way, which
-- settles or heals it; else {layout, seg 0, ..., seg n-1}, each as lua/seg_status.lua answers.
-- layout as lua/layout_read.lua answers it. An error when a number is damaged.
-- @include int.lua
-- @include layout_fields.lua
-- @include seg_fields.lua
local m = layout_fields(KEYS[1], KEYS[2], ARGV)
if m.err then return m end
local n = (#KEYS - 2) / 3
if m[4] == 'p' or #m[6] > 0 or int(m[2]) ~= n or n < 1 then return {m} end
local out = {m}
for k = 0, n - 1 do
  local s = seg_fields(KEYS[3 + 3 * k], KEYS[4 + 3 * k], KEYS[5 + 3 * k])
  if s.err then return s end
  if s[2] ~= m[1] then return {m} end
  out[#out + 1] = s
end
return out
