-- One admission step of the SKU's gate on Redis's clock (docs/design.md "The admission rule"):
-- the start step when due; the live tickets past their expiry dropped (fin counts them); then,
-- unless paused or before the start, the places the rate allows since the last step (carry +
-- rate * elapsed ms, in thousandths of a buyer, at most one second's worth banked), within the
-- budget floor(k * remaining / 100) - (live + fin - fin_seen), queue_max_active - live (when
-- set), the places waiting and STORE_GATE_STEP_MAX, admitted in rank order: each gets
-- adm "<rank>:<exp>" and a live entry scored exp (now + the ticket's lifetime).
-- fin_seen: the fin the instance had received before it SENT the status read that gave
-- remaining; a ticket used after that read (fin moved past fin_seen) is counted as still live,
-- so a unit it sold, already missing from remaining, is not counted twice as budget.
-- KEYS: q, line, adm, live, meta.  ARGV: remaining, reserved (units for sale and in holds),
-- fin_seen, seed candidate (32 hex digits), then the seven meta field names of
-- include/gate_rules.lua.
-- -> {STORE_GATE_OK, served, length, fin, issued, live, admitted now, sold_out, paused,
-- shuffled, seed ('' before the start's shuffle is done, or in FIFO mode), now}; {STORE_GATE_NO_SKU} or
-- {STORE_GATE_NO_ROOM} with nothing written.
-- @include int.lua
-- @include now.lua
local remaining, reserved, fin_seen = int(ARGV[1]), int(ARGV[2]), int(ARGV[3])
local cand = ARGV[4]
if not remaining or not reserved or not fin_seen or remaining < 0 or reserved < 0 or
   fin_seen < 0 or #cand ~= 32 or not string.find(cand, '^[0-9a-f]+$') then
  return redis.error_reply('ERR gate_admit: remaining, reserved, fin_seen (integers >= 0) and ' ..
                           'a 32-hex-digit seed candidate are required')
end
local qk, lk, meta_key, gf = KEYS[1], KEYS[2], KEYS[5], 5
-- @include gate_rules.lua
local gq = redis.call('HMGET', qk, 'served', 'last_ms', 'carry', 'fin', 'issued')
local served, last_ms, carry = int(gq[1] or '0'), int(gq[2] or '0'), int(gq[3] or '0')
local fin, issued = int(gq[4] or '0'), int(gq[5] or '0')
if not served or not last_ms or not carry or not fin or not issued then return damaged(qk) end
if not gq[2] or last_ms > now then last_ms = now end
-- @include gate_start.lua
fin = fin + redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. string.format('%.0f', now))
local live = redis.call('ZCARD', KEYS[4])
local length = redis.call('ZCARD', lk)
local n = 0
if q_paused ~= 0 or g_shuffled ~= '1' then
  carry = 0 -- nothing banked while paused or before the start: no burst when it ends
else
  local allow = carry + q_rate * (now - last_ms)
  if allow > q_rate * 1000 then allow = q_rate * 1000 end
  n = math.floor(allow / 1000)
  local unseen = fin - fin_seen
  if unseen < 0 then unseen = 0 end -- a gate deleted and made again since fin_seen
  local budget = math.floor(q_pct * remaining / 100) - (live + unseen)
  if budget < n then n = budget end
  if q_active > 0 and q_active - live < n then n = q_active - live end
  if length - served < n then n = length - served end
  if n > STORE_GATE_STEP_MAX then n = STORE_GATE_STEP_MAX end
  if n < 0 then n = 0 end
  carry = allow - n * 1000
end
if n > 0 then
  local exp = string.format('%.0f', now + q_ttl * 1000)
  local us = redis.call('ZRANGE', lk, served, served + n - 1)
  local a, l = {}, {}
  for i = 1, #us do
    a[#a + 1] = us[i]
    a[#a + 1] = string.format('%.0f', served + i - 1) .. ':' .. exp
    l[#l + 1] = exp
    l[#l + 1] = us[i]
    if #a >= 1000 then
      redis.call('HSET', KEYS[3], unpack(a))
      redis.call('ZADD', KEYS[4], unpack(l))
      a, l = {}, {}
    end
  end
  if #a > 0 then
    redis.call('HSET', KEYS[3], unpack(a))
    redis.call('ZADD', KEYS[4], unpack(l))
  end
  n = #us
  served, issued, live = served + n, issued + n, live + n
end
local sold_out = (remaining + reserved == 0) and 1 or 0
redis.call('HSET', qk, 'served', string.format('%.0f', served), 'issued',
           string.format('%.0f', issued), 'fin', string.format('%.0f', fin), 'last_ms',
           string.format('%.0f', now), 'carry', string.format('%.0f', carry), 'sold_out', sold_out)
if g_shuffled ~= '1' then g_seed = '' end
return {STORE_GATE_OK, served, length, fin, issued, live, n, sold_out, q_paused,
        g_shuffled == '1' and 1 or 0, g_seed, now}
