-- A user joins the SKU's line (docs/design.md "The waiting room"): the start step when due
-- (include/gate_start.lua), then the user's place: the one it has, or a new one (seq + 1,
-- score seq - 2^52 before the start in shuffled mode, else 2^52 + seq: behind everyone).
-- KEYS: q, line, meta.  ARGV: user, seed candidate (32 hex digits), then the seven meta field
-- names of include/gate_rules.lua.
-- -> {code, rank or -1 (waiting for the start's shuffle), seq, served, shuffled}: code
-- STORE_GATE_OK (a new place) or STORE_GATE_AGAIN (the same place); {STORE_GATE_NO_SKU} or
-- {STORE_GATE_NO_ROOM} with nothing written.
-- @include int.lua
-- @include now.lua
local user, cand = ARGV[1], ARGV[2]
if user == '' or #cand ~= 32 or not string.find(cand, '^[0-9a-f]+$') then
  return redis.error_reply('ERR gate_join: a user and a 32-hex-digit seed candidate are required')
end
local qk, lk, meta_key, gf = KEYS[1], KEYS[2], KEYS[3], 3
-- @include gate_rules.lua
local gq = redis.call('HMGET', qk, 'seq', 'served')
local seq, served = int(gq[1] or '0'), int(gq[2] or '0')
if not seq or not served then return damaged(qk) end
-- @include gate_start.lua
local shuffled = g_shuffled == '1' and 1 or 0
local score = redis.call('ZSCORE', lk, user)
local code = STORE_GATE_AGAIN
if not score then
  code = STORE_GATE_OK
  seq = seq + 1
  local s = seq - STORE_GATE_LATE_BASE
  if g_started or q_fifo ~= 0 then s = STORE_GATE_LATE_BASE + seq end
  score = string.format('%.0f', s)
  redis.call('HSET', qk, 'seq', string.format('%.0f', seq))
  redis.call('ZADD', lk, score, user)
end
local rank = redis.call('ZRANK', lk, user)
if shuffled == 0 and tonumber(score) < STORE_GATE_LATE_BASE then rank = -1 end
return {code, rank, seq, served, shuffled}
