-- The order commit, as the body of a lockcore fenced script (the guard has checked that this
-- request still holds the segment's lock with its fencing token, and releases it afterwards).
-- KEYS: stock, sver, cnt, orders, idem.  ARGV: version, quantity, order id, record, idem key
-- (may be ""), the Idempotency-Key claim's expiry in Redis ms ("0": no key).
-- -> {code, value}, code one of STORE_COMMIT_* (store_scripts.h).
-- Nothing is written unless the result is 1: every read and check comes first, and the first
-- write is the order record's HSET (a wrong-typed :orders key fails there, before anything
-- else), so no separate type check of :orders is needed.
-- @include int.lua
local sv = redis.call('GET', KEYS[2])
if sv and not int(sv) then return {STORE_COMMIT_DAMAGED, 0} end
if sv ~= ARGV[1] then return {STORE_COMMIT_VERSION, int(sv or '0')} end
if ARGV[6] ~= '0' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now > tonumber(ARGV[6]) then return {STORE_COMMIT_EXPIRED, 0} end
end
local n = int(redis.call('GET', KEYS[1]) or '')
local c = redis.call('HMGET', KEYS[3], 't', 's', 'o')
if ARGV[5] ~= '' then redis.call('HEXISTS', KEYS[5], ARGV[5]) end
if not n or not int(c[1] or '') or not int(c[2] or '') or not int(c[3] or '') then
  return {STORE_COMMIT_DAMAGED, 0}
end
local q = tonumber(ARGV[2])
if n < q then return {STORE_COMMIT_SHORT, n} end
redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])
local left = redis.call('DECRBY', KEYS[1], q)
redis.call('HINCRBY', KEYS[3], 's', q)
redis.call('HINCRBY', KEYS[3], 'o', 1)
if ARGV[5] ~= '' then redis.call('HSET', KEYS[5], ARGV[5], ARGV[3]) end
return {STORE_COMMIT_OK, left}
