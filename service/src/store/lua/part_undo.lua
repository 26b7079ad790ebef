-- Undoes a part of a multi-segment order that never came to exist (its primary was never
-- written: docs/design.md "Orders larger than one segment"), on the part's segment: the record
-- goes, and when it was live its units go back to the stock and s (and r for a hold) down; o
-- counts orders, never parts. Either way the part's id is tombstoned in the segment's undone
-- set (member the id, score Redis ms; kept ARGV[2] ms), which commit_body.lua refuses a part or
-- primary of: a commit of the part still on its way (a stalled request, a master whose clock is
-- behind) can no longer land after the undo, so no heal depends on the masters' clocks.
-- Idempotent: a part already undone is missing. Never a primary nor a one-segment order: a
-- record without part_of is refused with nothing written.
-- With ARGV[3] "primary" (the healer, on the primary's segment, before it undoes any part): the
-- primary's record exists -> {STORE_UNDO_WHOLE}, nothing written (the order is whole: roll
-- forward); else its id is tombstoned -> {STORE_UNDO_NONE} (it can never be written: roll back).
-- KEYS: stock, cnt, orders, undone.  ARGV: the part's (or primary's) id, the tombstone's keep
-- ms, "" or "primary".
-- -> {STORE_UNDO_DONE} undone now, {STORE_UNDO_NONE} no such record, {STORE_UNDO_WHOLE} the
--    primary exists; an error (nothing written) for a record without part_of, or a damaged
--    record or counter
-- @include int.lua
-- @include units.lua
-- @include time_ms.lua
local keep = tonumber(ARGV[2])
if keep == nil or keep < 1 then return redis.error_reply('ERR part_undo: bad keep ms') end
local function tombstone()
  local now = time_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - keep)
  redis.call('ZADD', KEYS[4], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[4], keep)
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if ARGV[3] == 'primary' then
  if rec then return {STORE_UNDO_WHOLE} end
  tombstone()
  return {STORE_UNDO_NONE}
end
if not rec then
  tombstone()
  return {STORE_UNDO_NONE}
end
local ok, o = pcall(cjson.decode, rec)
if not ok or type(o) ~= 'table' then return redis.error_reply('ERR part record damaged') end
if o.part_of == nil then
  return redis.error_reply('ERR part_undo: ' .. ARGV[1] .. ' is not a part (no part_of)')
end
if o.status == ORDER_STATUS_CANCELLED or o.status == ORDER_STATUS_EXPIRED then
  redis.call('HDEL', KEYS[3], ARGV[1]) -- its units are back already
  tombstone()
  return {STORE_UNDO_DONE}
end
if o.status ~= ORDER_STATUS_CREATED and o.status ~= ORDER_STATUS_RESERVED and o.status ~= ORDER_STATUS_CONFIRMED then
  return redis.error_reply('ERR part record damaged')
end
local q = units(o)
if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) then
  return redis.error_reply('ERR part record damaged')
end
local n = int(redis.call('GET', KEYS[1]) or '')
local c = redis.call('HMGET', KEYS[2], 's', 'o', 'r')
local s, cnt, r = int(c[1] or ''), int(c[2] or ''), int(c[3] or '0')
if n == nil or s == nil or cnt == nil or r == nil or s < q or
   (o.status == ORDER_STATUS_RESERVED and r < q) then
  return redis.error_reply('ERR part segment damaged: ' .. KEYS[2])
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('INCRBY', KEYS[1], q)
redis.call('HINCRBY', KEYS[2], 's', -q)
if o.status == ORDER_STATUS_RESERVED then redis.call('HINCRBY', KEYS[2], 'r', -q) end
tombstone()
return {STORE_UNDO_DONE}
