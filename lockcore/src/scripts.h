/*
 * Every Lua script lockcore runs, in one place. A lock NAME is a hash {o: owner token, c: hold
 * count, f: fencing token} whose TTL is the lease; NAME:fence counts fencing tokens and never
 * expires; NAME:unlock is the channel published on every full release.
 *
 * The hold count is the handle's: every script that changes it gets the handle's count and
 * sets c from that (never HINCRBY), so running one request twice (a retry, or an undo after a
 * lost reply) changes nothing the second time, and a c that drifted (a request that ran whose
 * reply was lost) is set right by the handle's next call.
 */
#ifndef LOCKCORE_SCRIPTS_H
#define LOCKCORE_SCRIPTS_H

/* KEYS: lock, fence, read keys...  ARGV: owner token, lease ms, the handle's hold count n.
 * -> {1, fence, hold count, values of read keys...} when taken (count 1) or re-entered
 *    (count n + 1, set, not added: the same re-entry sent twice counts once),
 *    {0, pttl of the holder's lease} when another owner holds it.
 * The reads come first, so a read that fails (WRONGTYPE) aborts before anything is written. A
 * hold of this owner that the handle does not count (n = 0: an earlier reply and its undo were
 * lost) is replaced by a fresh hold with a new fencing token rather than re-entered. */
#define LC_LUA_ACQUIRE                                                                             \
    "local vals = {}\n"                                                                            \
    "for i = 3, #KEYS do vals[#vals + 1] = redis.call('GET', KEYS[i]) end\n"                       \
    "local h = redis.call('HMGET', KEYS[1], 'o', 'f')\n"                                           \
    "local fence, count\n"                                                                         \
    "if h[1] == false or (h[1] == ARGV[1] and ARGV[3] == '0') then\n"                              \
    "  fence = redis.call('INCR', KEYS[2])\n"                                                      \
    "  count = 1\n"                                                                                \
    "  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'c', 1, 'f', fence)\n"                            \
    "elseif h[1] == ARGV[1] then\n"                                                                \
    "  count = tonumber(ARGV[3]) + 1\n"                                                            \
    "  redis.call('HSET', KEYS[1], 'c', count)\n"                                                  \
    "  fence = tonumber(h[2])\n"                                                                   \
    "else\n"                                                                                       \
    "  return {0, redis.call('PTTL', KEYS[1])}\n"                                                  \
    "end\n"                                                                                        \
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                                                    \
    "local r = {1, fence, count}\n"                                                                \
    "for i = 1, #vals do r[#r + 1] = vals[i] end\n"                                                \
    "return r\n"

/* KEYS: lock.  ARGV: owner token, lease ms, unlock channel, the handle's hold count n before
 * this release.
 * -> holds left, n - 1 (set, not subtracted; 0 = deleted and published), or -1 when the owner
 *    does not hold it. Also the undo of an acquire whose reply was lost, with n = the handle's
 *    count + 1: deletes a fresh hold of this owner, or sets a re-entered count back. */
#define LC_LUA_RELEASE                                                                             \
    "if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return -1 end\n"                          \
    "local c = tonumber(ARGV[4]) - 1\n"                                                            \
    "if c > 0 then\n"                                                                              \
    "  redis.call('HSET', KEYS[1], 'c', c)\n"                                                      \
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                                                  \
    "  return c\n"                                                                                 \
    "end\n"                                                                                        \
    "redis.call('DEL', KEYS[1])\n"                                                                 \
    "redis.call('PUBLISH', ARGV[3], '0')\n"                                                        \
    "return 0\n"

/* KEYS: lock.  ARGV: owner token, lease ms.  -> 1 renewed, 0 not the owner (lost). */
#define LC_LUA_RENEW                                                                               \
    "if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end\n"                           \
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                                                    \
    "return 1\n"

/* KEYS: lock.  ARGV: unlock channel.  -> 1 deleted and published, 0 there was no lock. */
#define LC_LUA_FORCE                                                                               \
    "if redis.call('DEL', KEYS[1]) == 1 then\n"                                                    \
    "  redis.call('PUBLISH', ARGV[1], '0')\n"                                                      \
    "  return 1\n"                                                                                 \
    "end\n"                                                                                        \
    "return 0\n"

/* Redlock's second step (redlock_async.c), on a node where the quorum's fencing token T is
 * above the node's own: KEYS: lock, fence.  ARGV: owner token, T.
 * -> 1 when this owner holds the lock there: NAME:fence raised to at least T (never lowered) and
 *    the hold's f set to T; 0 (nothing changed) when it does not. Once a majority has T, every
 *    later acquire's INCR on any majority meets a node at T or above, so its token is larger. */
#define LC_LUA_FENCE_RAISE                                                                         \
    "if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end\n"                           \
    "local t = tonumber(ARGV[2])\n"                                                                \
    "if tonumber(redis.call('GET', KEYS[2]) or '0') < t then\n"                                    \
    "  redis.call('SET', KEYS[2], ARGV[2])\n"                                                      \
    "end\n"                                                                                        \
    "redis.call('HSET', KEYS[1], 'f', ARGV[2])\n"                                                  \
    "return 1\n"

/* The guard around a body made by lc_fenced_script_new.
 * KEYS: lock, body keys...  ARGV: owner, fence, release, lease ms, channel, body args...
 * release: "0", or the handle's hold count n to drop one hold of after the body, as the release
 * script does (c set to n - 1, or the lock deleted and the unlock published at 0).
 * -> {0} when the caller no longer holds the lock with that fence (nothing ran),
 *    {1, body result} otherwise. */
#define LC_LUA_GUARD_HEAD                                                                          \
    "local lc_lock_key = KEYS[1]\n"                                                                \
    "local lc_h = redis.call('HMGET', lc_lock_key, 'o', 'f')\n"                                    \
    "if lc_h[1] ~= ARGV[1] or lc_h[2] ~= ARGV[2] then return {0} end\n"                            \
    "local lc_fence = tonumber(ARGV[2])\n"                                                         \
    "local lc_release, lc_lease, lc_channel = tonumber(ARGV[3]), ARGV[4], ARGV[5]\n"               \
    "local lc_result = (function(KEYS, ARGV)\n"

#define LC_LUA_GUARD_TAIL                                                                          \
    "\nend)({unpack(KEYS, 2)}, {unpack(ARGV, 6)})\n"                                               \
    "if lc_release > 0 then\n"                                                                     \
    "  if lc_release > 1 then\n"                                                                   \
    "    redis.call('HSET', lc_lock_key, 'c', lc_release - 1)\n"                                   \
    "    redis.call('PEXPIRE', lc_lock_key, lc_lease)\n"                                           \
    "  else\n"                                                                                     \
    "    redis.call('DEL', lc_lock_key)\n"                                                         \
    "    redis.call('PUBLISH', lc_channel, '0')\n"                                                 \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "return {1, lc_result}\n"

/* The guard around a body made by lc_token_fenced_script_new (a data-store script fenced by a
 * token alone, as Redlock's): LC_LUA_FENCE_ACCEPT_SRC first, then
 * KEYS: seen key, body keys...  ARGV: token, body args...
 * -> {0, seen} when the token is below the highest seen at the seen key, or equal to it from
 *    another owner (nothing ran; seen: the seen token, a decimal string),
 *    {1, body result} otherwise (the token is recorded as seen). */
#define LC_LUA_TOKEN_GUARD_HEAD                                                                    \
    "local lc_ok, lc_seen = lc_fence_accept(KEYS[1], ARGV[1])\n"                                   \
    "if not lc_ok then return {0, lc_seen} end\n"                                                  \
    "local lc_fence = tonumber(string.match(ARGV[1], '^%d+'))\n"                                   \
    "local lc_result = (function(KEYS, ARGV)\n"

#define LC_LUA_TOKEN_GUARD_TAIL                                                                    \
    "\nend)({unpack(KEYS, 2)}, {unpack(ARGV, 2)})\n"                                               \
    "return {1, lc_result}\n"

/* Pasted into data-store scripts: accept a write only from the newest fencing token seen.
 * token: "T" or "T:owner" (T decimal, owner the acquisition's id); the seen key holds the same
 * form. Tokens compare exactly as decimal strings (by length, then by text), never as Lua
 * numbers (doubles: exact below 2^53 only). T above the seen token: accepted and recorded; T
 * equal: accepted only with the same owner (the same acquisition writing again: a source that
 * went back may hand the very token out to a second holder), so "T" after "T" (no owner, the
 * old form) still passes. -> true, or false and the seen token (its decimal part), which the
 * lock raises its source to (docs/lockcore.md, "Token sources that go back"). */
#define LC_LUA_FENCE_ACCEPT_SRC                                                                    \
    "local function lc_fence_split(v)\n"                                                           \
    "  local d = string.match(v, '^0*(%d+)$')\n"                                                   \
    "  if d then return d, '' end\n"                                                               \
    "  local o\n"                                                                                  \
    "  d, o = string.match(v, '^0*(%d+):(.+)$')\n"                                                 \
    "  if d == nil then\n"                                                                         \
    "    local n = tonumber(v)\n"                                                                  \
    "    if n == nil then return nil end\n"                                                        \
    "    d, o = string.format('%.0f', n), ''\n"                                                    \
    "  end\n"                                                                                      \
    "  return d, o\n"                                                                              \
    "end\n"                                                                                        \
    "local function lc_fence_accept(seen_key, token)\n"                                            \
    "  local sd, so = lc_fence_split(redis.call('GET', seen_key) or '0')\n"                        \
    "  local td, to\n"                                                                             \
    "  if type(token) == 'number' then td, to = lc_fence_split(string.format('%.0f', token))\n"    \
    "  else td, to = lc_fence_split(tostring(token)) end\n"                                        \
    "  if sd == nil then sd, so = '0', '' end\n"                                                   \
    "  if td == nil then return false, sd end\n"                                                   \
    "  if #td < #sd or (#td == #sd and td < sd) then return false, sd end\n"                       \
    "  if td == sd then\n"                                                                         \
    "    if to ~= so then return false, sd end\n"                                                  \
    "    return true\n"                                                                            \
    "  end\n"                                                                                      \
    "  redis.call('SET', seen_key, to == '' and td or (td .. ':' .. to))\n"                        \
    "  return true\n"                                                                              \
    "end\n"

#endif
