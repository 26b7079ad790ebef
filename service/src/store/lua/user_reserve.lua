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
-- @include reserve_entry.lua
local m = redis.call('HMGET', KEYS[2], 'segments', 'hwm', 'limit', 'sale_start', 'sale_end')
for i = 1, 5 do
  if m[i] and not int(m[i]) then return damaged(KEYS[2]) end
  m[i] = int(m[i] or '0')
end
if m[1] == 0 then return {STORE_RESERVE_NO_SKU} end
if m[4] > 0 and now < m[4] then return {STORE_RESERVE_NOT_STARTED, m[4], now} end
if m[5] > 0 and now >= m[5] then return {STORE_RESERVE_ENDED, m[5], now} end
if m[3] == 0 then return {STORE_RESERVE_FREE, 0, now} end
-- the entries for the caller to look for in the segments [0, max(segments, hwm))
return reserve_entry(m[3], math.max(m[1], m[2]), function() return {} end,
                     function(q, exp) return {q, exp, -1} end)
