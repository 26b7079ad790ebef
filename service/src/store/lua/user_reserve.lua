-- Reserves a request's units against its user's limit before the order runs (docs/design.md
-- "Per-user limits"): the rules are read from the meta here, on Redis's clock, so a limit or a
-- sale window is never judged on an instance's stale copy. The entry counts until the order
-- is known not to have committed; the commit refuses to run after the entry's expiry, as it
-- does after an Idempotency-Key claim's.
-- KEYS: users, meta.  ARGV: user, order hex, units, bound ms, margin ms.
-- -> {code, ...}, code one of STORE_RESERVE_* (store_scripts.h); an error (nothing written) when
--    the meta or the user's entries are damaged
-- @include int.lua
-- @include now.lua
-- @include user_entries.lua
local m = redis.call('HMGET', KEYS[2], 'segments', 'hwm', 'limit', 'sale_start', 'sale_end')
for i = 1, 5 do
  if m[i] and not int(m[i]) then return damaged(KEYS[2]) end
  m[i] = int(m[i] or '0')
end
if m[1] == 0 then return {STORE_RESERVE_NO_SKU} end
if m[4] > 0 and now < m[4] then return {STORE_RESERVE_NOT_STARTED, m[4], now} end
if m[5] > 0 and now >= m[5] then return {STORE_RESERVE_ENDED, m[5], now} end
if m[3] == 0 then return {STORE_RESERVE_FREE, 0, now} end
local e = entries_read(ARGV[1])
if not e then return redis.error_reply('ERR damaged: ' .. KEYS[1] .. ' entry of a user') end
if e[ARGV[2]] then return {STORE_RESERVE_OK, e[ARGV[2]][2], now} end
local held = 0
for _, v in pairs(e) do held = held + v[1] end
local q = tonumber(ARGV[3])
if held + q > m[3] then
  -- the entries for the caller to look for in the segments (user_resolve.lua settles them):
  -- first those past their commit deadline or known committed (issue 29: an order that has
  -- ended, its give-back still queued, or that a PUT's reset wiped, counts for nothing), then
  -- those still within it (dropped only when their order is found ended); at most 8
  local r = {STORE_RESERVE_OVER, m[3], held, math.max(m[1], m[2])}
  for pass = 1, 2 do
    for h, v in pairs(e) do
      local past = v[2] == 0 or now > v[2] + tonumber(ARGV[5])
      if (pass == 1) == past and #r < 4 + 3 * 8 then
        r[#r + 1] = h
        r[#r + 1] = string.format('%.0f', v[2])
        r[#r + 1] = past and '1' or '0'
      end
    end
  end
  return r
end
local exp = now + tonumber(ARGV[4])
e[ARGV[2]] = {q, exp, -1}
entries_write(ARGV[1], e)
return {STORE_RESERVE_OK, exp, now}
