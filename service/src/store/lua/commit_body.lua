-- The order commit, as the body of a lockcore fenced script (the guard has checked that this
-- request still holds the segment's lock with its fencing token, and releases it afterwards).
-- KEYS: stock, sver, cnt, orders, idem, due, log, rver, undone (the segment's tombstones of
-- multi-segment ids part_undo.lua undid)[, users, meta[, hold index]].
-- ARGV: version, quantity, order id, record, idem key (may be ""), the expiry in Redis ms of
-- the request's Idempotency-Key claim and per-user reservation ("0": neither), sale_start,
-- sale_end (Redis ms, "0": none), hold TTL in s ("0": the order is final at once) (the rules at
-- their STORE_COMMIT_ARG_* positions, rules_table.h), the order log's cap ("0": no order log;
-- else the most entries its stream may hold before new orders are refused), and for the log's
-- entry: the user ("" none), the SKU, the segment; then the record's kind ("" a one-segment order,
-- "primary" the record of a multi-segment order, "part" another of its parts: docs/design.md
-- "Orders larger than one segment"), and for a primary its parts "k:q,..." and its total units
-- (the order log's entry); then, when the user's limit is checked here (one Redis: KEYS users,
-- meta follow; docs/design.md "Per-user limits"), the order's hex (its entry's key), else "";
-- then the version of the sale rules the order was judged by (meta's rver, layout_read.lua;
-- STORE_COMMIT_ARG_RULES_VERSION); then a cart's items for the order log's entry (a cart's
-- primary: "<sku>:<k>:<q>,..." of every part of every item, orderlog.h; "" for every other
-- commit; STORE_COMMIT_ARG_ITEMS).
-- KEYS[12], on one Redis with a hold: the hold index (store.h store_holds_key; KEYS users and
-- meta are then declared even without the limit's check).
-- -> {code, value[, record]}, code one of STORE_COMMIT_* (store_scripts.h); a hold's record
--    comes back with its expires_at (on this Redis's clock), to be answered as it is stored.
-- Nothing is written unless the result is 1: every read and check comes first, and the first
-- write is the order record's HSET (a wrong-typed :orders key fails there, before anything
-- else), so no separate type check of :orders is needed.
-- @include int.lua
-- @include time_ms.lua
-- @include iso_time.lua
-- @include log.lua
-- @include user_entries.lua
local sv = redis.call('GET', KEYS[2])
if sv and not int(sv) then return {STORE_COMMIT_DAMAGED, 0} end
if sv ~= ARGV[1] then return {STORE_COMMIT_VERSION, int(sv or '0')} end
-- >> the sale rules' version (docs/design.md "The sale rules' version"): a PATCH raised this
-- segment's rver before it answered; rules older than that are stale: refused, re-read
local rv = int(redis.call('GET', KEYS[8]) or '0')
if not rv then return {STORE_COMMIT_DAMAGED, 0} end
if rv > tonumber(ARGV[STORE_COMMIT_ARG_RULES_VERSION]) then return {STORE_COMMIT_RULES, rv} end
-- <<
local start = tonumber(ARGV[STORE_COMMIT_ARG_SALE_START])
local fin = tonumber(ARGV[STORE_COMMIT_ARG_SALE_END])
local ttl = tonumber(ARGV[STORE_COMMIT_ARG_TTL])
local cap = tonumber(ARGV[10])
-- a part of a multi-segment order: no order log entry, no due-set entry (its primary's expiry
-- ends it), no Idempotency-Key (the primary's)
local part = ARGV[14] == 'part'
-- Redis's clock only when something is judged or written by it (an order with no claim, no
-- rules and no log, the common one, needs no TIME)
local now = 0
if ARGV[6] ~= '0' or start > 0 or fin > 0 or ttl > 0 or cap > 0 then now = time_ms() end
if ARGV[6] ~= '0' and now > tonumber(ARGV[6]) then return {STORE_COMMIT_EXPIRED, 0} end
-- issue 29 (multi): a part or primary whose id part_undo.lua tombstoned (the order was rolled
-- back) is refused whatever the clocks say; its undone set is KEYS[9] (store_commit_call)
if (part or ARGV[14] == 'primary') and redis.call('ZSCORE', KEYS[9], ARGV[3]) then
  return {STORE_COMMIT_EXPIRED, 1}
end
if start > 0 and now < start then return {STORE_COMMIT_NOT_STARTED, start} end
if fin > 0 and now >= fin then return {STORE_COMMIT_ENDED, fin} end
if cap > 0 then
  local len = redis.call('XLEN', KEYS[7])
  if len >= cap then return {STORE_COMMIT_LOG_FULL, len} end
end
local n = int(redis.call('GET', KEYS[1]) or '')
local c = redis.call('HMGET', KEYS[3], 't', 's', 'o', 'r')
if ARGV[5] ~= '' then redis.call('HEXISTS', KEYS[5], ARGV[5]) end
if not n or not int(c[1] or '') or not int(c[2] or '') or not int(c[3] or '') or
   not int(c[4] or '0') then
  return {STORE_COMMIT_DAMAGED, 0}
end
local q = tonumber(ARGV[2])
-- the per-user limit, on one Redis: the user's entries and the segment in one script, so the
-- entry is written with the order (known committed, expiry 0) and no reservation goes before
local ue
local hex = ARGV[17]
if hex ~= '' and not part then
  local lim = redis.call('HGET', KEYS[11], 'limit')
  if lim and not int(lim) then return {STORE_COMMIT_DAMAGED, 0} end
  lim = int(lim or '0')
  if lim > 0 then
    ue = entries_read(ARGV[11], KEYS[10])
    if not ue then return {STORE_COMMIT_DAMAGED, 0} end
    if not ue[hex] then
      local held, open = 0, 0
      for _, v in pairs(ue) do
        held = held + v[1]
        -- open: not known committed, or (issue 29) its segment unknown (the reservation's path
        -- wrote it: a multi-segment order), so not looked at below: the caller's refusal
        -- (user_reserve.lua) looks for their orders
        if v[2] > 0 or v[3] < 0 then open = open + 1 end
      end
      if held + q > lim then
        -- issue 29: before refusing, an entry known committed (segment known) whose order has
        -- ended or no longer exists (a cancel or expiry whose give-back is still queued; an
        -- order a PUT's reset wiped) counts for nothing and goes with this order's write; its
        -- give-back, when drained, finds it gone (user_release.lua), so the count drops once
        held = 0
        for h, v in pairs(ue) do
          if v[2] == 0 and v[3] >= 0 then
            local okey = string.gsub(KEYS[4], '/%d+}:orders$', '/' .. v[3] .. '}:orders')
            local rec = redis.call('HGET', okey, h .. '-' .. v[3] .. '-' .. ARGV[12])
            local ok, o = pcall(cjson.decode, rec or '')
            if not rec or (ok and type(o) == 'table' and
                           (o.status == ORDER_STATUS_CANCELLED or o.status == ORDER_STATUS_EXPIRED)) then
              ue[h] = nil
            else
              held = held + v[1]
            end
          else
            held = held + v[1]
          end
        end
        if held + q > lim then return {STORE_COMMIT_LIMIT, lim, held, open} end
      end
    end
  end
end
if n < q then return {STORE_COMMIT_SHORT, n} end
local rec = ARGV[4]
local exp = now + ttl * 1000
if ttl > 0 and not part then
  rec = string.sub(rec, 1, -2) .. ',"expires_at":"' .. iso(exp) .. '"}'
end
redis.call('HSET', KEYS[4], ARGV[3], rec)
local left = redis.call('DECRBY', KEYS[1], q)
redis.call('HINCRBY', KEYS[3], 's', q)
-- o counts orders: a part of a multi-segment order is not one (its primary is)
if not part then redis.call('HINCRBY', KEYS[3], 'o', 1) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[5], ARGV[5], ARGV[3]) end
if ue then
  ue[hex] = {q, 0, tonumber(ARGV[13])}
  entries_write(ARGV[11], ue, KEYS[10])
end
-- issue 29 (order log, inventory-sink): an order not logged is counted in cnt's u, for the sink
-- to find and backfill from the order record (docs/design.md "The order log")
if cap == 0 and not part then redis.call('HINCRBY', KEYS[3], 'u', 1) end
if cap > 0 and not part then
  if ARGV[14] == 'primary' then
    log_event(KEYS[7], ttl > 0 and ORDER_STATUS_RESERVED or ORDER_STATUS_CREATED, ARGV[3], ARGV[12],
              tonumber(ARGV[13]), ARGV[11], tonumber(ARGV[16]), now, ARGV[1], ARGV[15],
              ARGV[STORE_COMMIT_ARG_ITEMS])
  else
    log_event(KEYS[7], ttl > 0 and ORDER_STATUS_RESERVED or ORDER_STATUS_CREATED, ARGV[3], ARGV[12],
              tonumber(ARGV[13]), ARGV[11], q, now, ARGV[1])
  end
end
if ttl > 0 then
  redis.call('HINCRBY', KEYS[3], 'r', q)
  if part then return {STORE_COMMIT_OK, left} end
  redis.call('ZADD', KEYS[6], exp, ARGV[3])
  -- issue 29: the sweeper finds the hold from Redis, not from the rules (docs/design.md "The
  -- sweeper"); LT: the index's score never passes the segment's earliest hold
  if KEYS[12] then redis.call('ZADD', KEYS[12], 'LT', exp, ARGV[12] .. '/' .. ARGV[13]) end
  return {STORE_COMMIT_OK, left, rec}
end
return {STORE_COMMIT_OK, left}
