/*
 * Every Lua script of the service, in one place (loaded once per server, run by SHA).
 *
 * Key schema (docs/design.md): SKU-wide keys carry the hash tag {S}, a segment's keys the tag
 * {S/k}, so every script below touches one Redis Cluster slot:
 *   inv:2:{S}:meta          hash {version, segments, stock, state, hwm, rseq}   the SKU's layout:
 *                         state "p" while the layout is being rolled out to the segments, "r"
 *                         once every segment carries it; hwm = segments whose keys may exist;
 *                         segments 0 = deleted
 *   inv:2:{S}:ver           integer                        version counter (survives DELETE)
 *   inv:2:{S}:rst           hash rid -> "version:units"    restocks not yet applied everywhere
 *   inv:2:{S}:rres:<rid>    string (24 h)                  restock rid was applied everywhere
 *   inv:2:{S}:idem:<key>    string (24 h)                  order Idempotency-Key claim: the order
 *                         id, or "pending:<expiry, Redis ms>:<token>" while an order runs
 *   inv:2:{S}:aidem:<op>:<key> string (24 h)               admin Idempotency-Key: "<status> <body>"
 *                         of the answer, or "P <rid> <units>" while a restock runs
 *   inv:2:{S}:slock         lockcore lock                  the single-lock strategy's lock
 *   inv:2:{S/k}:stock       integer                        units left in segment k
 *   inv:2:{S/k}:sver        integer                        version segment k belongs to (kept as
 *                                                        a tombstone when k is dropped)
 *   inv:2:{S/k}:cnt         hash {t, s, o}                 units stocked, units sold, live orders
 *   inv:2:{S/k}:orders      hash order id -> order JSON    order records of segment k
 *   inv:2:{S/k}:idem        hash idempotency key -> id     written atomically with the order
 *   inv:2:{S/k}:rst         set of rid                     restocks applied to segment k
 *   inv:2:{S/k}:lock        lockcore lock (+ :fence, :unlock)
 * Invariant per segment, kept by every script: t = stock + s, and s = sum of live orders' units.
 * Every script reads and checks all it needs before its first write: Redis does not roll a
 * script back, so a failure after a write would leave drift. Every number a script reads from
 * Redis goes through STORE_LUA_INT's int() (never a bare tonumber, which takes "10.0", " 5" and
 * "1e3" while INCRBY refuses them): a damaged one fails the script with nothing written.
 */
#ifndef INVENTORY_STORE_SCRIPTS_H
#define INVENTORY_STORE_SCRIPTS_H

/* The scripts are Lua text in C string macros, aligned by hand: clang-format would re-wrap them
 * (scripts/format.sh --check passes on this file as it is). */
/* clang-format off */

/* Segments a layout may have (SPEC §5), in C and in the scripts. */
#define STORE_SEGMENTS_MAX 1024
#define STORE_STR_(x) #x
#define STORE_STR(x) STORE_STR_(x)

/* Redis's clock in ms, as a Lua local `now` (scripts are replicated by effects, Redis >= 5). */
#define STORE_LUA_NOW                                                               \
    "local lc_t = redis.call('TIME')\n"                                             \
    "local now = tonumber(lc_t[1]) * 1000 + math.floor(tonumber(lc_t[2]) / 1000)\n"

/* The one number check of every script, as a Lua local function: int(v) is v as a number when
 * v is a string Redis's INCRBY/HINCRBY/DECRBY take as an integer (decimal digits, an optional
 * '-', no leading zero, no space, no '+', no fraction, no exponent) of at most 18 characters, so
 * that no increment of ours can overflow it and Lua compares it exactly enough; else nil.
 * damaged(key) is the error a script returns, before its first write, for a number that is not
 * one (it names the key, for the operator who repairs it by hand). */
#define STORE_LUA_INT                                                               \
    "local function int(v)\n"                                                       \
    "  if type(v) ~= 'string' or #v > 18 then return nil end\n"                     \
    "  if v ~= '0' and not string.find(v, '^%-?[1-9]%d*$') then return nil end\n"   \
    "  return tonumber(v)\n"                                                        \
    "end\n"                                                                         \
    "local function damaged(key)\n"                                                 \
    "  return redis.error_reply('ERR damaged: ' .. key .. ' holds a number that is not an integer')\n" \
    "end\n"

/* The next value of a version counter or restock id that a failover cannot make go back: one
 * more than the counter, but at least Redis's clock in microseconds (< 2^53: exact in Lua). A
 * counter lost with its master (the promoted replica had not received the last increments)
 * would hand out a version or restock id already used on the segments (other masters), and
 * the PUT or restock would be a silent no-op there. The clock has moved past every id given
 * out before the failover: ids given faster than one per microsecond run ahead of it by their
 * count at most, which a failover's seconds absorb (the nodes' clocks must agree to within the
 * failover's time). Sets Lua local `nid` from the previous value `prev` (a number). */
#define STORE_LUA_NEXT_ID                                                           \
    "local id_t = redis.call('TIME')\n"                                             \
    "local nid = math.max(prev + 1, tonumber(id_t[1]) * 1000000 + tonumber(id_t[2]))\n"

/* The intent of a PUT, in one step: the new version and the whole layout go into meta with
 * state "p"; restocks of the old layout still pending are dropped. A damaged ver, or a
 * damaged segments or hwm of the old layout (which say what keys must go), fails it with
 * nothing written. The segments are then reset
 * by whoever rolls the layout out (layout.c), so a PUT cut off half-way is completed by the
 * next reader. With an Idempotency-Key the answer is stored with it, and a replay gets it back.
 * KEYS: meta, ver, rst, aidem.  ARGV: segments, stock, sku, has key "1"/"0", key ttl ms.
 * -> {1, "<status> <body>"} applied | {0, stored answer} a replay (nothing applied) */
#define STORE_LUA_PUT_META                                                          \
    STORE_LUA_INT                                                                   \
    "if ARGV[4] == '1' then\n"                                                      \
    "  local prev = redis.call('GET', KEYS[4])\n"                                   \
    "  if prev then return {0, prev} end\n"                                         \
    "end\n"                                                                         \
    "local old = redis.call('HMGET', KEYS[1], 'version', 'segments', 'hwm')\n"      \
    "local oldseg, oldhwm = int(old[2] or '0'), int(old[3] or '0')\n"               \
    "if not oldseg or not oldhwm or oldseg < 0 or oldhwm < 0 or\n"                  \
    "   oldseg > " STORE_STR(STORE_SEGMENTS_MAX) " or oldhwm > " STORE_STR(STORE_SEGMENTS_MAX) " then\n" \
    "  return damaged(KEYS[1])\n"                                                   \
    "end\n"                                                                         \
    "local prev = int(redis.call('GET', KEYS[2]) or '0')\n"                         \
    "if not prev then return damaged(KEYS[2]) end\n"                                \
    "local hwm = math.max(oldhwm, oldseg, tonumber(ARGV[1]))\n"                      \
    STORE_LUA_NEXT_ID                                                               \
    "local v = nid\n"                                                               \
    "redis.call('SET', KEYS[2], string.format('%.0f', v))\n"                         \
    "redis.call('HSET', KEYS[1], 'version', string.format('%.0f', v), 'segments', ARGV[1],\n" \
    "           'stock', ARGV[2],\n"                                                \
    "           'state', 'p', 'hwm', hwm)\n"                                        \
    "redis.call('DEL', KEYS[3])\n"                                                  \
    "local status = (old[1] and oldseg > 0) and '200' or '201'\n"                   \
    "local resp = status .. ' ' .. string.format(\n"                                \
    "  '{\"sku\":\"%s\",\"stock\":%s,\"segments\":%s,\"version\":%.0f}',\n"         \
    "  ARGV[3], ARGV[2], ARGV[1], v)\n"                                             \
    "if ARGV[4] == '1' then redis.call('SET', KEYS[4], resp, 'PX', ARGV[5]) end\n"  \
    "return {1, resp}\n"

/* DELETE's intent: a layout of 0 segments (state "p"), rolled out like a PUT's; damaged
 * numbers as for PUT_META. KEYS: meta, ver, rst.  -> the new version, or 0 when there is no
 * such SKU */
#define STORE_LUA_DELETE_META                                                       \
    STORE_LUA_INT                                                                   \
    "local old = redis.call('HMGET', KEYS[1], 'version', 'segments', 'hwm')\n"      \
    "local oldseg, oldhwm = int(old[2] or '0'), int(old[3] or '0')\n"               \
    "if not oldseg or not oldhwm or oldseg < 0 or oldhwm < 0 or\n"                  \
    "   oldseg > " STORE_STR(STORE_SEGMENTS_MAX) " or oldhwm > " STORE_STR(STORE_SEGMENTS_MAX) " then\n" \
    "  return damaged(KEYS[1])\n"                                                   \
    "end\n"                                                                         \
    "if not old[1] or oldseg == 0 then return 0 end\n"                              \
    "local prev = int(redis.call('GET', KEYS[2]) or '0')\n"                         \
    "if not prev then return damaged(KEYS[2]) end\n"                                \
    "local hwm = math.max(oldhwm, oldseg)\n"                                        \
    STORE_LUA_NEXT_ID                                                               \
    "local v = string.format('%.0f', nid)\n"                                        \
    "redis.call('SET', KEYS[2], v)\n"                                               \
    "redis.call('HSET', KEYS[1], 'version', v, 'segments', 0, 'stock', 0, 'state', 'p',\n" \
    "           'hwm', hwm)\n"                                                      \
    "redis.call('DEL', KEYS[3])\n"                                                  \
    "return nid\n"

/* KEYS: meta, rst.  -> {version, segments, stock, state, hwm, {rid, "v:units", ...}} ("" for a
 * missing field: a layout written before state/stock/hwm existed is complete). An error when a
 * number of meta or of a pending restock (rid, version, units) is damaged: every settle and
 * every answer built on it would act on a number Redis does not hold. */
#define STORE_LUA_LAYOUT_READ                                                       \
    STORE_LUA_INT                                                                   \
    "local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'stock', 'state', 'hwm')\n" \
    "for i = 1, 5 do\n"                                                             \
    "  if not m[i] then m[i] = ''\n"                                                \
    "  elseif i ~= 4 and not int(m[i]) then return damaged(KEYS[1]) end\n"          \
    "end\n"                                                                         \
    "m[6] = redis.call('HGETALL', KEYS[2])\n"                                       \
    "for i = 1, #m[6], 2 do\n"                                                      \
    "  local v, u = string.match(m[6][i + 1], '^([^:]*):(.*)$')\n"                  \
    "  if not int(m[6][i]) or not int(v) or (int(u) or -1) < 0 then\n"             \
    "    return damaged(KEYS[2])\n"                                                 \
    "  end\n"                                                                       \
    "end\n"                                                                         \
    "return m\n"

/* Marks the layout rolled out, if it is still the current one.
 * KEYS: meta.  ARGV: version, segments.  -> 1 marked, 0 a newer layout is current */
#define STORE_LUA_LAYOUT_DONE                                                       \
    "if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end\n"      \
    "redis.call('HSET', KEYS[1], 'state', 'r', 'hwm', ARGV[2])\n"                   \
    "return 1\n"

/* Resets segment k to a layout's version, once: a segment already at that version or a newer
 * one is left alone, so concurrent and repeated roll-outs of any PUTs converge on the newest.
 * A damaged sver is an error (its version unknown, the segment may be a newer layout's).
 * KEYS: stock, sver, cnt, orders, idem, rst.  ARGV: version, units.  -> 1 reset, 0 left */
#define STORE_LUA_SEG_RESET                                                         \
    STORE_LUA_INT                                                                   \
    "local cur = int(redis.call('GET', KEYS[2]) or '0')\n"                          \
    "if not cur then return damaged(KEYS[2]) end\n"                                 \
    "if cur >= tonumber(ARGV[1]) then return 0 end\n"                               \
    "redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])\n"              \
    "redis.call('SET', KEYS[1], ARGV[2])\n"                                         \
    "redis.call('SET', KEYS[2], ARGV[1])\n"                                         \
    "redis.call('HSET', KEYS[3], 't', ARGV[2], 's', 0, 'o', 0)\n"                   \
    "return 1\n"

/* Drops segment k (outside the layout of that version): its keys go, its sver stays as a
 * tombstone so that an older, slower roll-out cannot bring it back.  Same KEYS; ARGV: version. */
#define STORE_LUA_SEG_DROP                                                          \
    STORE_LUA_INT                                                                   \
    "local cur = int(redis.call('GET', KEYS[2]) or '0')\n"                          \
    "if not cur then return damaged(KEYS[2]) end\n"                                 \
    "if cur >= tonumber(ARGV[1]) then return 0 end\n"                               \
    "redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])\n"              \
    "redis.call('SET', KEYS[2], ARGV[1])\n"                                         \
    "return 1\n"

/* One segment's status, read atomically (so t = stock + s holds in every answer).
 * KEYS: stock, sver, cnt.  -> {stock, sver, t, s, o} ("" for missing); an error when one is
 * damaged (read as 0 it would make an answer that breaks t = stock + s). */
#define STORE_LUA_SEG_STATUS                                                        \
    STORE_LUA_INT                                                                   \
    "local c = redis.call('HMGET', KEYS[3], 't', 's', 'o')\n"                       \
    "local r = {redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[2]) or '',\n" \
    "           c[1] or '', c[2] or '', c[3] or ''}\n"                              \
    "for i = 1, 5 do\n"                                                             \
    "  if r[i] ~= '' and not int(r[i]) then return damaged(KEYS[i <= 2 and i or 3]) end\n" \
    "end\n"                                                                         \
    "return r\n"

/* A restock's intent: registered as pending under the current version, applied to the segments
 * by whoever rolls it out (layout.c); a damaged version, segments or rseq fails it with
 * nothing written. KEYS: meta, rst, aidem.  ARGV: units, has key, key ttl.
 * -> {1, rid, version, segments} | {0, stored answer} a replay | {-1} no such SKU */
#define STORE_LUA_RESTOCK_BEGIN                                                     \
    STORE_LUA_INT                                                                   \
    "if ARGV[2] == '1' then\n"                                                      \
    "  local prev = redis.call('GET', KEYS[3])\n"                                   \
    "  if prev then return {0, prev} end\n"                                         \
    "end\n"                                                                         \
    "local m = redis.call('HMGET', KEYS[1], 'version', 'segments', 'rseq')\n"       \
    "if not int(m[1] or '0') or not int(m[2] or '0') or not int(m[3] or '0') then\n" \
    "  return damaged(KEYS[1])\n"                                                   \
    "end\n"                                                                         \
    "if not m[1] or int(m[2] or '0') == 0 then return {-1} end\n"                   \
    "redis.call('HLEN', KEYS[2])\n"                                                 \
    "local prev = int(m[3] or '0')\n"                                              \
    STORE_LUA_NEXT_ID                                                               \
    "local rid = string.format('%.0f', nid)\n"                                      \
    "redis.call('HSET', KEYS[1], 'rseq', rid)\n"                                    \
    "redis.call('HSET', KEYS[2], rid, m[1] .. ':' .. ARGV[1])\n"                    \
    "if ARGV[2] == '1' then\n"                                                      \
    "  redis.call('SET', KEYS[3], 'P ' .. rid .. ' ' .. ARGV[1], 'PX', ARGV[3])\n"  \
    "end\n"                                                                         \
    "return {1, nid, int(m[1]), int(m[2])}\n"

/* Applies restock rid's share to segment k, once; a damaged sver, stock or t is an error
 * with nothing written (else INCRBY could pass and HINCRBY fail, and every settle would add
 * the units again). KEYS: stock, sver, cnt, rst.  ARGV: version, units, rid.
 * -> 1 applied now, 0 applied before, -1 the segment is not at that version */
#define STORE_LUA_RESTOCK_APPLY                                                     \
    STORE_LUA_INT                                                                   \
    "local sv = redis.call('GET', KEYS[2])\n"                                       \
    "if sv and not int(sv) then return damaged(KEYS[2]) end\n"                      \
    "if sv ~= ARGV[1] then return -1 end\n"                                         \
    "if redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 1 then return 0 end\n"         \
    "if not int(redis.call('GET', KEYS[1]) or '') then return damaged(KEYS[1]) end\n" \
    "if not int(redis.call('HGET', KEYS[3], 't') or '') then return damaged(KEYS[3]) end\n" \
    "if ARGV[2] ~= '0' then\n"                                                      \
    "  redis.call('INCRBY', KEYS[1], ARGV[2])\n"                                    \
    "  redis.call('HINCRBY', KEYS[3], 't', ARGV[2])\n"                              \
    "end\n"                                                                         \
    "redis.call('SADD', KEYS[4], ARGV[3])\n"                                        \
    "return 1\n"

/* Records restock rid as applied everywhere (call only once every segment of its version
 * took it). KEYS: meta, rst, rres.  ARGV: rid, version, ttl ms.
 * -> 1 done (now or before), 0 superseded (a PUT or DELETE came first) */
#define STORE_LUA_RESTOCK_END                                                       \
    "if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end\n"                     \
    "if redis.call('HGET', KEYS[1], 'version') ~= ARGV[2] then return 0 end\n"      \
    "if not redis.call('HGET', KEYS[2], ARGV[1]) then return 0 end\n"               \
    "redis.call('HDEL', KEYS[2], ARGV[1])\n"                                        \
    "redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])\n"                              \
    "return 1\n"

/* Where restock rid stands, exactly (whatever the number of restocks pending; both keys are
 * the SKU's, one slot). KEYS: rst, rres.  ARGV: rid.  -> one of: */
#define STORE_RESTOCK_GONE 0    /* neither: a PUT or DELETE dropped it before it was applied */
#define STORE_RESTOCK_DONE 1    /* applied to every segment of its layout */
#define STORE_RESTOCK_PENDING 2 /* registered, not yet everywhere: the next settle applies it */
#define STORE_LUA_RESTOCK_STATE                                                     \
    "if redis.call('EXISTS', KEYS[2]) == 1 then return " STORE_STR(STORE_RESTOCK_DONE) " end\n" \
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then\n"                        \
    "  return " STORE_STR(STORE_RESTOCK_PENDING) "\n"                               \
    "end\n"                                                                         \
    "return " STORE_STR(STORE_RESTOCK_GONE) "\n"

/* The order commit, as the body of a lockcore fenced script (the guard has checked that this
 * request still holds the segment's lock with its fencing token, and releases it afterwards).
 * KEYS: stock, sver, cnt, orders, idem.  ARGV: version, quantity, order id, record, idem key
 * (may be ""), the Idempotency-Key claim's expiry in Redis ms ("0": no key).
 * -> {code, value}, code one of STORE_COMMIT_* below.
 * Nothing is written unless the result is 1: every read and check comes first, and the first
 * write is the order record's HSET (a wrong-typed :orders key fails there, before anything
 * else), so no separate type check of :orders is needed. */
#define STORE_COMMIT_OK 1          /* {1, stock left}: the order is written */
#define STORE_COMMIT_SHORT (-1)    /* {-1, stock left}: not enough */
#define STORE_COMMIT_VERSION (-3)  /* {-3, segment version}: not at the order's version */
#define STORE_COMMIT_EXPIRED (-4)  /* {-4, 0}: the claim expired (another request may own the key) */
#define STORE_COMMIT_DAMAGED (-5)  /* {-5, 0}: a counter or sver that is not an integer */
#define STORE_LUA_COMMIT_BODY                                                       \
    STORE_LUA_INT                                                                   \
    "local sv = redis.call('GET', KEYS[2])\n"                                       \
    "if sv and not int(sv) then return {" STORE_STR(STORE_COMMIT_DAMAGED) ", 0} end\n" \
    "if sv ~= ARGV[1] then return {" STORE_STR(STORE_COMMIT_VERSION) ", int(sv or '0')} end\n" \
    "if ARGV[6] ~= '0' then\n"                                                      \
    "  local t = redis.call('TIME')\n"                                              \
    "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"     \
    "  if now > tonumber(ARGV[6]) then return {" STORE_STR(STORE_COMMIT_EXPIRED) ", 0} end\n" \
    "end\n"                                                                         \
    "local n = int(redis.call('GET', KEYS[1]) or '')\n"                             \
    "local c = redis.call('HMGET', KEYS[3], 't', 's', 'o')\n"                       \
    "if ARGV[5] ~= '' then redis.call('HEXISTS', KEYS[5], ARGV[5]) end\n"           \
    "if not n or not int(c[1] or '') or not int(c[2] or '') or not int(c[3] or '') then\n" \
    "  return {" STORE_STR(STORE_COMMIT_DAMAGED) ", 0}\n"                         \
    "end\n"                                                                         \
    "local q = tonumber(ARGV[2])\n"                                                 \
    "if n < q then return {" STORE_STR(STORE_COMMIT_SHORT) ", n} end\n"             \
    "redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])\n"                               \
    "local left = redis.call('DECRBY', KEYS[1], q)\n"                               \
    "redis.call('HINCRBY', KEYS[3], 's', q)\n"                                      \
    "redis.call('HINCRBY', KEYS[3], 'o', 1)\n"                                      \
    "if ARGV[5] ~= '' then redis.call('HSET', KEYS[5], ARGV[5], ARGV[3]) end\n"     \
    "return {" STORE_STR(STORE_COMMIT_OK) ", left}\n"

/* The atomic strategy's commit: the same without any lock.  Same KEYS, ARGV and results. */
#define STORE_LUA_COMMIT_ATOMIC STORE_LUA_COMMIT_BODY

/* KEYS: stock, cnt, orders.  ARGV: order id.
 * -> {code[, record]}, code one of STORE_CANCEL_* below; an error (nothing written) when the
 *    record or the segment is damaged */
#define STORE_CANCEL_DONE 1        /* {1, record}: cancelled now */
#define STORE_CANCEL_NONE 0        /* {0}: no such order */
#define STORE_CANCEL_ALREADY (-1)  /* {-1, record}: was already cancelled */
#define STORE_LUA_CANCEL                                                            \
    STORE_LUA_INT                                                                   \
    "local rec = redis.call('HGET', KEYS[3], ARGV[1])\n"                            \
    "if not rec then return {" STORE_STR(STORE_CANCEL_NONE) "} end\n"              \
    "local ok, o = pcall(cjson.decode, rec)\n"                                      \
    "if not ok or type(o) ~= 'table' then\n"                                        \
    "  return redis.error_reply('ERR order record damaged')\n"                      \
    "end\n"                                                                         \
    "if o.status == 'cancelled' then return {" STORE_STR(STORE_CANCEL_ALREADY) ", rec} end\n" \
    "local q = tonumber(o.quantity)\n"                                              \
    "local n = int(redis.call('GET', KEYS[1]) or '')\n"                             \
    "local c = redis.call('HMGET', KEYS[2], 's', 'o')\n"                            \
    "local s, cnt = int(c[1] or ''), int(c[2] or '')\n"                             \
    "if q == nil or q < 1 or q > 1e15 or q ~= math.floor(q) or n == nil or s == nil or cnt == nil\n" \
    "   or s < q or cnt < 1 then\n"                                                 \
    "  return redis.error_reply('ERR segment damaged')\n"                           \
    "end\n"                                                                         \
    "o.status = 'cancelled'\n"                                                      \
    "rec = cjson.encode(o)\n"                                                       \
    "redis.call('HSET', KEYS[3], ARGV[1], rec)\n"                                   \
    "redis.call('INCRBY', KEYS[1], q)\n"                                            \
    "redis.call('HINCRBY', KEYS[2], 's', -q)\n"                                     \
    "redis.call('HINCRBY', KEYS[2], 'o', -1)\n"                                     \
    "return {" STORE_STR(STORE_CANCEL_DONE) ", rec}\n"

/* Claims an order's Idempotency-Key. The claim expires on Redis's clock (no instance's clock
 * decides anything): the commit refuses to run after the expiry, and the claim may be taken
 * over only once it is `margin` ms past it. An expired claim's order, if it committed, is in the
 * idem hash of one of the segments whose keys may exist, so the layout as Redis has it (meta,
 * the same slot) comes back with it: never an instance's cached layout, which a re-PUT through
 * another instance leaves stale.
 * KEYS: claim, meta.  ARGV: bound ms, key ttl ms, token, margin ms.
 * -> {code, value, ...}, code one of STORE_CLAIM_* below */
#define STORE_CLAIM_TAKEN 0   /* {0, value}: taken (an order id, or pending and alive) */
#define STORE_CLAIM_OWNED 1   /* {1, value, expiry}: claimed for this request */
#define STORE_CLAIM_EXPIRED 2 /* {2, value, segments, hwm}: pending and expired: the caller may
                                 look for its order in segments [0, max(segments, hwm)) and take
                                 it over */
#define STORE_LUA_IDEM_CLAIM                                                        \
    STORE_LUA_NOW                                                                   \
    "local v = redis.call('GET', KEYS[1])\n"                                        \
    "if v then\n"                                                                   \
    "  local exp = tonumber(string.match(v, '^pending:(%d+)') or '')\n"             \
    "  if exp and now > exp + tonumber(ARGV[4]) then\n"                             \
    "    local m = redis.call('HMGET', KEYS[2], 'segments', 'hwm')\n"                \
    "    return {" STORE_STR(STORE_CLAIM_EXPIRED) ", v, tonumber(m[1] or '0') or 0,\n" \
    "            tonumber(m[2] or '0') or 0}\n"                                      \
    "  end\n"                                                                       \
    "  return {" STORE_STR(STORE_CLAIM_TAKEN) ", v}\n"                              \
    "end\n"                                                                         \
    "local exp = now + tonumber(ARGV[1])\n"                                         \
    "v = 'pending:' .. string.format('%.0f', exp) .. ':' .. ARGV[3]\n"              \
    "redis.call('SET', KEYS[1], v, 'PX', ARGV[2])\n"                                \
    "return {" STORE_STR(STORE_CLAIM_OWNED) ", v, exp}\n"

/* Raises the SKU's version counter to at least a version seen on one of its segments, so that
 * the next PUT or DELETE gets a version above it (a segment ahead of the meta: the meta write of
 * a later PUT was lost in a failover, with the INCR of the counter). Never lowers it.
 * KEYS: ver.  ARGV: version seen.  -> the counter */
#define STORE_LUA_VER_RAISE                                                         \
    "local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"                 \
    "if v < tonumber(ARGV[1]) then\n"                                              \
    "  redis.call('SET', KEYS[1], ARGV[1])\n"                                      \
    "  return tonumber(ARGV[1])\n"                                                 \
    "end\n"                                                                        \
    "return v\n"

/* Takes a claim over from the value seen: to the order id found (when given), else to a fresh
 * pending claim of this request. KEYS: claim.  ARGV: expected, order id or "", bound, token.
 * -> {code, ...}, code one of STORE_TAKEOVER_* below */
#define STORE_TAKEOVER_CHANGED 0 /* {0}: the claim changed meanwhile */
#define STORE_TAKEOVER_ADOPTED 1 /* {1, order id}: the claim names the order found */
#define STORE_TAKEOVER_OWNED 2   /* {2, value, expiry}: now this request's */
#define STORE_LUA_IDEM_TAKEOVER                                                     \
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"                                \
    "  return {" STORE_STR(STORE_TAKEOVER_CHANGED) "}\n"                              \
    "end\n"                                                                         \
    "if ARGV[2] ~= '' then\n"                                                       \
    "  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')\n"                            \
    "  return {" STORE_STR(STORE_TAKEOVER_ADOPTED) ", ARGV[2]}\n"                                                       \
    "end\n"                                                                         \
    STORE_LUA_NOW                                                                   \
    "local exp = now + tonumber(ARGV[3])\n"                                         \
    "local v = 'pending:' .. string.format('%.0f', exp) .. ':' .. ARGV[4]\n"        \
    "redis.call('SET', KEYS[1], v, 'KEEPTTL')\n"                                    \
    "return {" STORE_STR(STORE_TAKEOVER_OWNED) ", v, exp}\n"

/* KEYS: claim.  ARGV: expected value, new value ("" deletes).  -> one of: */
#define STORE_SWAP_NOT_OURS 0 /* the claim holds another value: nothing written */
#define STORE_SWAP_DONE 1     /* swapped (or deleted) */
#define STORE_LUA_IDEM_SWAP                                                         \
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"                                \
    "  return " STORE_STR(STORE_SWAP_NOT_OURS) "\n"                                  \
    "end\n"                                                                         \
    "if ARGV[2] == '' then redis.call('DEL', KEYS[1])\n"                            \
    "else redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') end\n"                     \
    "return " STORE_STR(STORE_SWAP_DONE) "\n"

/* clang-format on */

#endif
