-- The intent of a PUT, in one step: the new version and the whole layout go into meta with
-- state "p"; restocks of the old layout still pending are dropped. A damaged ver, or a
-- damaged segments or hwm of the old layout (which say what keys must go), fails it with
-- nothing written. The segments are then reset
-- by whoever rolls the layout out (layout.c), so a PUT cut off half-way is completed by the
-- next reader. With an Idempotency-Key the answer is stored with it, and a replay gets it back.
-- The sale rules (rules_table.h) are written with the layout: a PUT sets every rule, "0" for
-- none, and a new rules version rver above the meta's (docs/design.md "The sale rules'
-- version").
-- And the hold flag "holds" (docs/design.md "The sweeper"): "1" when the new layout's TTL is
-- set, else "0": the roll-out's reset wipes the old layout's holds (until it has, the layout
-- is pending and the sweeper sweeps it whatever the flag says).
-- The SKU's per-user counts (KEYS[5]) and its multi-segment orders' intents (KEYS[6]) go: the
-- PUT replaced every order they counted or name.
-- KEYS: meta, ver, rst, aidem, users, multi.  ARGV: segments, stock, sku, has key "1"/"0", key ttl
-- ms, the rules as JSON members for the answer ('"limit_per_user":0,...'), then for each rule
-- its meta field and its value (a canonical integer, checked by the caller; a field "$<f>" is
-- a string rule, rules_table.h STR: meta field f, its value a checked name or "" for none).
-- -> {1, "<status> <body>", changed} applied, changed 1 when a rule that was set (not "0")
--    gets another value (stock.c: the answer then waits out the instances' cached rules) |
--    {0, stored answer} a replay (nothing applied)
-- @include int.lua
if ARGV[4] == '1' then
  local prev = redis.call('GET', KEYS[4])
  if prev then return {0, prev} end
end
-- @include old_layout.lua
local prev = int(redis.call('GET', KEYS[2]) or '0')
if not prev then return damaged(KEYS[2]) end
local rprev = int(redis.call('HGET', KEYS[1], 'rver') or '0')
if not rprev then return damaged(KEYS[1]) end
local hwm = math.max(oldhwm, oldseg, tonumber(ARGV[1]))
-- @include next_id.lua
local v = nid
redis.call('SET', KEYS[2], string.format('%.0f', v))
redis.call('HSET', KEYS[1], 'version', string.format('%.0f', v), 'segments', ARGV[1],
           'stock', ARGV[2],
           'state', 'p', 'hwm', hwm, 'rver', string.format('%.0f', math.max(v, rprev + 1)))
local changed = 0
for i = 7, #ARGV, 2 do
  local f = string.gsub(ARGV[i], '^%$', '')
  local was = redis.call('HGET', KEYS[1], f)
  if was and was ~= '0' and was ~= '' and was ~= ARGV[i + 1] then changed = 1 end
  redis.call('HSET', KEYS[1], f, ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'holds', '0')
for i = 7, #ARGV, 2 do
  if ARGV[i] == 'ttl' and ARGV[i + 1] ~= '0' then redis.call('HSET', KEYS[1], 'holds', '1') end
end
redis.call('DEL', KEYS[3], KEYS[5], KEYS[6])
local status = (old[1] and oldseg > 0) and '200' or '201'
local resp = status .. ' ' .. string.format(
  '{"sku":"%s","stock":%s,"segments":%s,"version":%.0f,%s}',
  ARGV[3], ARGV[2], ARGV[1], v, ARGV[6])
if ARGV[4] == '1' then redis.call('SET', KEYS[4], resp, 'PX', ARGV[5]) end
return {1, resp, changed}
