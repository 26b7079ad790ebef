-- Claims an order's Idempotency-Key, or a waiting-room ticket (SPEC §16). The claim expires on
-- Redis's clock (no instance's clock decides anything): the commit refuses to run after the
-- expiry, and the claim may be taken over only once it is `margin` ms past it. An expired
-- claim's order, if it committed, is in the idem hash of one of the segments whose keys may
-- exist, so the layout as Redis has it (meta, the same slot) comes back with it: never an
-- instance's cached layout, which a re-PUT through another instance leaves stale.
-- A ticket's claim (ARGV[5] given; docs/design.md "The ticket and the order") also carries the
-- client's Idempotency-Key (hex, "-" none) in its value, written here with the claim: the token
-- ends ".<key hex>" and the final value is "<order id> <key hex>". Only a request with the same
-- key waits for the claim or replays its order; any other request is refused at once
-- (STORE_CLAIM_TICKET_USED), and a new claim is refused once Redis's clock is past the ticket's
-- expiry (STORE_CLAIM_TICKET_EXPIRED), nothing written.
-- KEYS: claim, meta.  ARGV: bound ms, key ttl ms, token, margin ms[, ticket expiry ms, key hex].
-- -> {code, value, ...}, code one of STORE_CLAIM_* (store_scripts.h)
-- @include now.lua
local ticket = ARGV[5] ~= nil
local v = redis.call('GET', KEYS[1])
if v then
  local exp = tonumber(string.match(v, '^pending:(%d+)') or '')
  if exp and now > exp + tonumber(ARGV[4]) then
    local m = redis.call('HMGET', KEYS[2], 'segments', 'hwm')
    return {STORE_CLAIM_EXPIRED, v, tonumber(m[1] or '0') or 0,
            tonumber(m[2] or '0') or 0}
  end
  if not ticket then return {STORE_CLAIM_TAKEN, v} end
  local mine = ARGV[6]
  if exp then
    if mine == '-' or string.match(v, '%.([^.]*)$') ~= mine then
      return {STORE_CLAIM_TICKET_USED, v}
    end
    return {STORE_CLAIM_TAKEN, v}
  end
  local id, k = string.match(v, '^(%S+) (%S+)$')
  if mine == '-' or k ~= mine then return {STORE_CLAIM_TICKET_USED, v} end
  return {STORE_CLAIM_TAKEN, id, v}
end
local ttl = tonumber(ARGV[2])
if ticket then
  local texp = tonumber(ARGV[5])
  if now > texp then return {STORE_CLAIM_TICKET_EXPIRED, ''} end
  ttl = ttl + (texp - now) -- the claim outlives the ticket: a used ticket stays used
end
local exp = now + tonumber(ARGV[1])
v = 'pending:' .. string.format('%.0f', exp) .. ':' .. ARGV[3]
redis.call('SET', KEYS[1], v, 'PX', string.format('%.0f', ttl))
return {STORE_CLAIM_OWNED, v, exp}
