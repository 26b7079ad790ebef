-- Takes a claim over from the value seen: to the order id found (when given), else to a fresh
-- pending claim of this request. A ticket's claim (ARGV[5], the ticket's expiry in Redis ms) is
-- taken for this request only while Redis's clock is not past it: a takeover is a new use of
-- the ticket (STORE_TAKEOVER_TICKET_EXPIRED, nothing written).
-- KEYS: claim.  ARGV: expected, order id or "", bound, token[, ticket expiry ms].
-- -> {code, ...}, code one of STORE_TAKEOVER_* (store_scripts.h)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {STORE_TAKEOVER_CHANGED}
end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return {STORE_TAKEOVER_ADOPTED, ARGV[2]}
end
-- @include now.lua
if ARGV[5] and now > tonumber(ARGV[5]) then return {STORE_TAKEOVER_TICKET_EXPIRED} end
local exp = now + tonumber(ARGV[3])
local v = 'pending:' .. string.format('%.0f', exp) .. ':' .. ARGV[4]
redis.call('SET', KEYS[1], v, 'KEEPTTL')
return {STORE_TAKEOVER_OWNED, v, exp}
