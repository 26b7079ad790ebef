-- Reserves a request's units against its user's limit in a limit group (docs/design.md "Limit
-- groups"), as user_reserve.lua does against a SKU's limit, in the group's own slot: the limit is
-- read from the group's meta here, so a PUT of the group holds from its answer and an instance's
-- copy of nothing is trusted. No group (never made, or deleted): STORE_RESERVE_FREE, the order is
-- not capped by it. The entries are user_entries.lua's, with two more elements: the SKU of the
-- order (so an entry names its order "<hex>-<k>-<sku>", wherever it committed) and how many of
-- that SKU's segments to look in, [0, n) (the layout the order was judged by: max(segments,
-- hwm)): a refusal looks the orders of the entries past their deadline up there (order_limit.c).
-- KEYS: users, meta (the group's).  ARGV: user, order hex, units, bound ms, margin ms, sku, n.
-- -> {STORE_RESERVE_OK, expiry, now} (already there: its expiry) | {STORE_RESERVE_FREE, 0, now} |
--    {STORE_RESERVE_OVER, limit, held, 0, then hex, expiry, past, sku, n for each entry to look
--    for (at most 8)}; an error (nothing written) when the meta or the user's entries are damaged
-- @include int.lua
-- @include now.lua
-- @include user_entries.lua
-- @include reserve_entry.lua
local lim = redis.call('HGET', KEYS[2], 'limit')
if not lim then return {STORE_RESERVE_FREE, 0, now} end
lim = int(lim)
if not lim then return damaged(KEYS[2]) end
if lim <= 0 then return {STORE_RESERVE_FREE, 0, now} end
-- as user_reserve.lua's: each entry listed with the SKU and segments its order may be in (an
-- entry of an older format, without them, is given as "" and 0: never found, so settled as not
-- committed once past)
return reserve_entry(lim, 0, function(v)
  return {type(v[4]) == 'string' and v[4] or '', type(v[5]) == 'number' and v[5] or 0}
end, function(q, exp) return {q, exp, -1, ARGV[6], tonumber(ARGV[7])} end)
