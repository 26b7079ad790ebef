-- The fair start (docs/design.md "The fair start"), run by every gate script that writes, after
-- its checks: the first one that sees Redis's now >= sale_start (or no sale_start) while the
-- gate's `shuffled` is unset ends the pre-start. In shuffled mode (queue_fifo 0) the seed is the
-- caller's candidate `cand` (32 hex digits the instance drew at random just now, so nobody knew
-- it before the start), and every place joined before the start (score < 2^52, the join's seq)
-- gets the score tonumber(sub(sha1hex(seed .. user), 1, 13), 16), below 2^52: a keyed
-- permutation anyone can recompute from the published seed and the users; equal scores (two
-- users whose digests share 52 bits) are ordered by the user id's bytes, as Redis orders equal
-- scores. Places joined after it (or in FIFO mode) have 2^52 + seq, behind every one of these.
-- Nothing is rescored after: a rank is final once `shuffled` is 1.
-- Needs the locals now, qk (the gate's key), lk (the line's), cand, q_fifo, sale_start; sets
-- g_shuffled ('1' or not) and g_seed ('' none).
local gs = redis.call('HMGET', qk, 'shuffled', 'seed')
local g_shuffled, g_seed = gs[1] or '', gs[2] or ''
if g_shuffled ~= '1' and now >= sale_start then
  g_seed = ''
  if q_fifo == 0 then
    g_seed = cand
    local late = '(' .. string.format('%.0f', STORE_GATE_LATE_BASE)
    local pre = redis.call('ZRANGEBYSCORE', lk, '-inf', late)
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
  end
  redis.call('HSET', qk, 'shuffled', '1', 'seed', g_seed)
  g_shuffled = '1'
end
