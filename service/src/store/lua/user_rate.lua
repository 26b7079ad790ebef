-- One instance's share of a user's requests in one window of the per-user request rate
-- (--user-rps; loop/userrate.c, docs/design.md "Bot friction"): adds what the instance
-- counted since its last flush and answers the totals of every instance. Windows are whole
-- seconds of Redis's clock (the instance's estimate of it, rclock.h), numbered by the caller.
-- The hash keeps the current window w with its admitted a and tried t, and the tried of the
-- window before (pt, for each instance's share of a user over the limit). Increments of the
-- window just ended (an instance flushing late) go to pt; older ones are dropped. The key lives
-- 3 s after its last write: a user gone quiet leaves nothing behind.
-- KEYS: urate.  ARGV: window, admitted delta, tried delta  -> {w, a, t, pt}
local w, da, dt = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = redis.call('HMGET', KEYS[1], 'w', 'a', 't', 'pt')
local sw = tonumber(cur[1]) or -1
local a, t, pt = tonumber(cur[2]) or 0, tonumber(cur[3]) or 0, tonumber(cur[4]) or 0
if w > sw then
  if sw == w - 1 then pt = t else pt = 0 end
  a, t, sw = 0, 0, w
end
if w == sw then
  a, t = a + da, t + dt
elseif w == sw - 1 then
  pt = pt + dt
end
redis.call('HSET', KEYS[1], 'w', sw, 'a', a, 't', t, 'pt', pt)
redis.call('PEXPIRE', KEYS[1], 3000)
return {sw, a, t, pt}
