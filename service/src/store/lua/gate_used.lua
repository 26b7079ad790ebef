-- Marks a user's ticket used by an order (after the order was made): adm "used:<order id>", out
-- of the live tickets, fin + 1 unless its expiry was counted first (an order made just before
-- the expiry, marked after the admission step dropped it). Once: a second call writes nothing.
-- KEYS: q, adm, live.  ARGV: user, order id.
-- -> {STORE_GATE_USED_DONE}, {STORE_GATE_USED_ALREADY, the order id it holds} or
-- {STORE_GATE_USED_NONE} (never admitted: nothing written).
if ARGV[1] == '' or ARGV[2] == '' then
  return redis.error_reply('ERR gate_used: a user and an order id are required')
end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return {STORE_GATE_USED_NONE} end
if string.sub(v, 1, 5) == 'used:' then return {STORE_GATE_USED_ALREADY, string.sub(v, 6)} end
redis.call('HSET', KEYS[2], ARGV[1], 'used:' .. ARGV[2])
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then redis.call('HINCRBY', KEYS[1], 'fin', 1) end
return {STORE_GATE_USED_DONE}
