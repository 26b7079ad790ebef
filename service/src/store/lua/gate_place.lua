-- A user's place, read only (the start step is not run here).
-- KEYS: q, line, adm.  ARGV: user.
-- -> {rank or -1, adm value or '', placed}: placed 0 when the user has no place (rank -1);
-- rank -1 also for a place waiting for the start's shuffle (joined before it in shuffled mode:
-- score < 2^52 while the gate's shuffled is unset); adm "<n>:<exp_ms>", "used:<order id>" or ''.
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then return {-1, '', 0} end
local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
local pre = tonumber(score) < STORE_GATE_LATE_BASE
if pre and redis.call('HGET', KEYS[1], 'shuffled') ~= '1' then rank = -1 end
return {rank, redis.call('HGET', KEYS[3], ARGV[1]) or '', 1}
