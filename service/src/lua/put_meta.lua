-- The intent of a PUT, in one step: the new version and the whole layout go into meta with
-- state "p"; restocks of the old layout still pending are dropped. A damaged ver, or a
-- damaged segments or hwm of the old layout (which say what keys must go), fails it with
-- nothing written. The segments are then reset
-- by whoever rolls the layout out (layout.c), so a PUT cut off half-way is completed by the
-- next reader. With an Idempotency-Key the answer is stored with it, and a replay gets it back.
-- The sale rules (rules.h) are written with the layout: a PUT sets all four, "0" for none.
-- And the hold flag "holds" (docs/design.md "The sweeper"): "1" when the new layout's TTL is
-- set, else "0": the roll-out's reset wipes the old layout's holds (until it has, the layout
-- is pending and the sweeper sweeps it whatever the flag says).
-- The SKU's per-user counts (KEYS[5]) and its multi-segment orders' intents (KEYS[6]) go: the
-- PUT replaced every order they counted or name.
-- KEYS: meta, ver, rst, aidem, users, multi.  ARGV: segments, stock, sku, has key "1"/"0", key ttl
-- ms, limit, sale_start ms, sale_end ms, ttl s (canonical integers, checked by the caller),
-- the rules as JSON members for the answer ('"limit_per_user":0,...').
-- -> {1, "<status> <body>"} applied | {0, stored answer} a replay (nothing applied)
-- @include int.lua
if ARGV[4] == '1' then
  local prev = redis.call('GET', KEYS[4])
  if prev then return {0, prev} end
end
-- @include old_layout.lua
local prev = int(redis.call('GET', KEYS[2]) or '0')
if not prev then return damaged(KEYS[2]) end
local hwm = math.max(oldhwm, oldseg, tonumber(ARGV[1]))
-- @include next_id.lua
local v = nid
redis.call('SET', KEYS[2], string.format('%.0f', v))
redis.call('HSET', KEYS[1], 'version', string.format('%.0f', v), 'segments', ARGV[1],
           'stock', ARGV[2],
           'state', 'p', 'hwm', hwm, 'limit', ARGV[6], 'sale_start', ARGV[7],
           'sale_end', ARGV[8], 'ttl', ARGV[9], 'holds', ARGV[9] == '0' and '0' or '1')
redis.call('DEL', KEYS[3], KEYS[5], KEYS[6])
local status = (old[1] and oldseg > 0) and '200' or '201'
local resp = status .. ' ' .. string.format(
  '{"sku":"%s","stock":%s,"segments":%s,"version":%.0f,%s}',
  ARGV[3], ARGV[2], ARGV[1], v, ARGV[10])
if ARGV[4] == '1' then redis.call('SET', KEYS[4], resp, 'PX', ARGV[5]) end
return {1, resp}
