/*
 * Every Lua script of the service, in one place (loaded once per server, run by SHA).
 *
 * Key schema (docs/design.md): SKU-wide keys carry the hash tag {S}, a segment's keys the tag
 * {S:k}, so every script below touches one Redis Cluster slot:
 *   inv:{S}:meta          hash {version, segments}        the SKU's current layout
 *   inv:{S}:ver           integer                        version counter (survives DELETE)
 *   inv:{S}:idem:<key>    string                         Idempotency-Key claim -> order id
 *   inv:{S}:slock         lockcore lock                  the single-lock strategy's lock
 *   inv:{S:k}:stock       integer                        units left in segment k
 *   inv:{S:k}:sver        integer                        version segment k belongs to
 *   inv:{S:k}:cnt         hash {t, s, o}                 units stocked, units sold, live orders
 *   inv:{S:k}:orders      hash order id -> order JSON    order records of segment k
 *   inv:{S:k}:idem        hash idempotency key -> id     written atomically with the order
 *   inv:{S:k}:lock        lockcore lock (+ :fence, :unlock)
 * Invariant per segment, kept by every script: t = stock + s, and s = sum of live orders' units.
 */
#ifndef INVENTORY_STORE_SCRIPTS_H
#define INVENTORY_STORE_SCRIPTS_H

/* KEYS: meta, ver.  ARGV: segments.  -> {new version, 1 if it existed before, old segments} */
#define STORE_LUA_PUT_META                                                          \
    "local old = redis.call('HMGET', KEYS[1], 'version', 'segments')\n"            \
    "local v = redis.call('INCR', KEYS[2])\n"                                       \
    "redis.call('HSET', KEYS[1], 'version', v, 'segments', ARGV[1])\n"              \
    "return {v, old[1] and 1 or 0, tonumber(old[2] or '0')}\n"

/* KEYS: stock, sver, cnt, orders, idem.  ARGV: version, units.  -> 1 */
#define STORE_LUA_SEG_RESET                                                         \
    "redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])\n"                                \
    "redis.call('SET', KEYS[1], ARGV[2])\n"                                         \
    "redis.call('SET', KEYS[2], ARGV[1])\n"                                         \
    "redis.call('HSET', KEYS[3], 't', ARGV[2], 's', 0, 'o', 0)\n"                   \
    "return 1\n"

/* KEYS: stock, sver, cnt.  ARGV: version, units.  -> new stock, or -1 on a version mismatch */
#define STORE_LUA_RESTOCK                                                           \
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end\n"                 \
    "redis.call('HINCRBY', KEYS[3], 't', ARGV[2])\n"                                \
    "return redis.call('INCRBY', KEYS[1], ARGV[2])\n"

/* The order commit, as the body of a lockcore fenced script (the guard has checked that this
 * request still holds the segment's lock with its fencing token, and releases it afterwards).
 * KEYS: stock, sver, cnt, orders, idem.  ARGV: version, quantity, order id, record, idem key
 * (may be "").  -> {1, stock left} | {-1, stock left} not enough | {-3, segment version} */
#define STORE_LUA_COMMIT_BODY                                                       \
    "local sv = redis.call('GET', KEYS[2])\n"                                       \
    "if sv ~= ARGV[1] then return {-3, tonumber(sv or '0')} end\n"                  \
    "local n = tonumber(redis.call('GET', KEYS[1]) or '0')\n"                       \
    "local q = tonumber(ARGV[2])\n"                                                 \
    "if n < q then return {-1, n} end\n"                                            \
    "local left = redis.call('DECRBY', KEYS[1], q)\n"                               \
    "redis.call('HINCRBY', KEYS[3], 's', q)\n"                                      \
    "redis.call('HINCRBY', KEYS[3], 'o', 1)\n"                                      \
    "redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])\n"                               \
    "if ARGV[5] ~= '' then redis.call('HSET', KEYS[5], ARGV[5], ARGV[3]) end\n"     \
    "return {1, left}\n"

/* The atomic strategy's commit: the same without any lock.  Same KEYS, ARGV and results. */
#define STORE_LUA_COMMIT_ATOMIC STORE_LUA_COMMIT_BODY

/* KEYS: stock, cnt, orders.  ARGV: order id.
 * -> {1, record} cancelled now | {-1, record} was already cancelled | {0} no such order */
#define STORE_LUA_CANCEL                                                            \
    "local rec = redis.call('HGET', KEYS[3], ARGV[1])\n"                            \
    "if not rec then return {0} end\n"                                              \
    "local o = cjson.decode(rec)\n"                                                 \
    "if o.status == 'cancelled' then return {-1, rec} end\n"                        \
    "o.status = 'cancelled'\n"                                                      \
    "local q = tonumber(o.quantity)\n"                                              \
    "rec = cjson.encode(o)\n"                                                       \
    "redis.call('HSET', KEYS[3], ARGV[1], rec)\n"                                   \
    "redis.call('INCRBY', KEYS[1], q)\n"                                            \
    "redis.call('HINCRBY', KEYS[2], 's', -q)\n"                                     \
    "redis.call('HINCRBY', KEYS[2], 'o', -1)\n"                                     \
    "return {1, rec}\n"

/* KEYS: claim.  ARGV: "pending:<ms>" value, ttl ms.
 * -> the existing value, or nil when this call made the claim */
#define STORE_LUA_IDEM_CLAIM                                                        \
    "local v = redis.call('GET', KEYS[1])\n"                                        \
    "if v then return v end\n"                                                      \
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"                          \
    "return false\n"

/* KEYS: claim.  ARGV: expected value, new value ("" deletes).  -> 1 swapped, 0 not ours */
#define STORE_LUA_IDEM_SWAP                                                         \
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"                  \
    "if ARGV[2] == '' then redis.call('DEL', KEYS[1])\n"                            \
    "else redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') end\n"                     \
    "return 1\n"

#endif
