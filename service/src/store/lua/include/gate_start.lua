-- The fair start (docs/design.md "The fair start"), run by every gate script that writes, after
-- its checks. Before the start (queue_fifo 0, Redis's now < sale_start) a join's score is
-- seq - 2^52 (negative: waiting for the shuffle). The first script that sees now >= sale_start
-- (or no sale_start) while the gate's `shuffled` is unset, and finds places to shuffle, takes
-- the seed: the caller's candidate `cand` (32 hex digits the instance drew at random just now,
-- so nobody knew it before the start), kept in the gate's `seed` (none in FIFO mode: nothing to
-- shuffle); then each script rescores at most STORE_GATE_SHUFFLE_STEP
-- of the negative places (a bounded step: 50,000 at once held Redis for over half a second) to
-- tonumber(sub(sha1hex(seed .. user), 1, 13), 16), in [0, 2^52): a keyed permutation anyone can
-- recompute from the published seed and the users; equal scores (two users whose digests share
-- 52 bits) are ordered by the user id's bytes, as Redis orders equal scores. When none is left
-- negative, `shuffled` = 1: admissions may start. Places joined after the start (or in FIFO
-- mode) have 2^52 + seq, behind every one of these. Nothing is rescored after: a rank is final
-- once `shuffled` is 1.
-- Needs the locals now, qk (the gate's key), lk (the line's), cand, q_fifo, sale_start; sets
-- g_shuffled ('1' or not), g_seed ('' none) and g_started (the start has passed: a join now is
-- a late one).
local gs = redis.call('HMGET', qk, 'shuffled', 'seed')
local g_shuffled, g_seed = gs[1] or '', gs[2] or ''
local g_started = g_shuffled == '1' or now >= sale_start
if g_shuffled ~= '1' and g_started then
  local pre = redis.call('ZRANGEBYSCORE', lk, '-inf', '(0', 'LIMIT', 0, STORE_GATE_SHUFFLE_STEP)
  if #pre > 0 and g_seed == '' then
    g_seed = cand
    redis.call('HSET', qk, 'seed', g_seed)
  end
  local zs = {}
  for i = 1, #pre do
    zs[#zs + 1] = string.format('%.0f', tonumber(string.sub(redis.sha1hex(g_seed .. pre[i]),
                                                            1, 13), 16))
    zs[#zs + 1] = pre[i]
    if #zs >= 1000 then
      redis.call('ZADD', lk, unpack(zs))
      zs = {}
    end
  end
  if #zs > 0 then redis.call('ZADD', lk, unpack(zs)) end
  if #pre < STORE_GATE_SHUFFLE_STEP then
    redis.call('HSET', qk, 'shuffled', '1')
    g_shuffled = '1'
  end
end
