-- Claims an order's Idempotency-Key. The claim expires on Redis's clock (no instance's clock
-- decides anything): the commit refuses to run after the expiry, and the claim may be taken
-- over only once it is `margin` ms past it. An expired claim's order, if it committed, is in the
-- idem hash of one of the segments whose keys may exist, so the layout as Redis has it (meta,
-- the same slot) comes back with it: never an instance's cached layout, which a re-PUT through
-- another instance leaves stale.
-- KEYS: claim, meta.  ARGV: bound ms, key ttl ms, token, margin ms.
-- -> {code, value, ...}, code one of STORE_CLAIM_* (store_scripts.h)
-- @include now.lua
local v = redis.call('GET', KEYS[1])
if v then
  local exp = tonumber(string.match(v, '^pending:(%d+)') or '')
  if exp and now > exp + tonumber(ARGV[4]) then
    local m = redis.call('HMGET', KEYS[2], 'segments', 'hwm')
    return {STORE_CLAIM_EXPIRED, v, tonumber(m[1] or '0') or 0,
            tonumber(m[2] or '0') or 0}
  end
  return {STORE_CLAIM_TAKEN, v}
end
local exp = now + tonumber(ARGV[1])
v = 'pending:' .. string.format('%.0f', exp) .. ':' .. ARGV[3]
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return {STORE_CLAIM_OWNED, v, exp}
