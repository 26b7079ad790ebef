/*
 * The service's Lua scripts (loaded once per server, run by SHA): each is a file of
 * service/src/store/lua/ (their KEYS, ARGV and replies are described there), built into the binary
 * by cmake/embed_lua.cmake as the string macro STORE_LUA_<NAME> of the generated store_lua.h.
 * The numbers below are defined once, here: the Lua files name them (STORE_COMMIT_OK, ...)
 * and the build puts these values in their place.
 *
 * Key schema: service/store_keys.txt, the one list of the keys (docs/design.md's key table, what
 * each holds, is checked against it, and so are store.c's names: tools/check/test_keys.c).
 * SKU-wide keys carry the hash tag {S}, a segment's keys the tag {S/k}, so every script below
 * touches one Redis Cluster slot.
 * Invariant per segment, kept by every script: t = stock + s, and s = sum of live orders' units.
 * Every script reads and checks all it needs before its first write: Redis does not roll a
 * script back, so a failure after a write would leave drift. Every number a script reads from
 * Redis goes through int() (lua/include/int.lua), never a bare tonumber, which takes "10.0",
 * " 5" and "1e3" while INCRBY refuses them: a damaged one fails the script with nothing written.
 */
#ifndef INVENTORY_STORE_SCRIPTS_H
#define INVENTORY_STORE_SCRIPTS_H

#include "store_lua.h" /* generated: STORE_LUA_PUT_META, ... */

/* Each number below is a plain integer (or a negative one in parentheses), alone on its line
 * after its name: embed_lua.cmake reads them with a regular expression. */

/* Segments a layout may have (SPEC §5), in C and in the scripts. */
#define STORE_SEGMENTS_MAX 1024

/* The atomic strategy's commit: the same script without any lock (lua/commit_body.lua). */
#define STORE_LUA_COMMIT_ATOMIC STORE_LUA_COMMIT_BODY

/* lua/patch_rules.lua: {code, ...}. */
/* {1, limit, sale_start, sale_end, ttl}: merged and written */
#define STORE_PATCH_OK 1
/* {0}: no such SKU, or deleted */
#define STORE_PATCH_NONE 0
/* {-1, sale_start, sale_end}: the merged window is empty; nothing written */
#define STORE_PATCH_INVALID (-1)

/* lua/restock_state.lua: where a restock stands. */
/* neither: a PUT or DELETE dropped it before it was applied */
#define STORE_RESTOCK_GONE 0
/* applied to every segment of its layout */
#define STORE_RESTOCK_DONE 1
/* registered, not yet everywhere: the next settle applies it */
#define STORE_RESTOCK_PENDING 2

/* lua/commit_body.lua's ARGV positions of the sale rules it is given (rules_table.h's arg
 * column: store_commit_call puts each rule there, the script reads ARGV[STORE_COMMIT_ARG_*]). */
#define STORE_COMMIT_ARG_SALE_START 7
#define STORE_COMMIT_ARG_SALE_END 8
#define STORE_COMMIT_ARG_TTL 9
/* ... and of the version of the rules the order was judged by */
#define STORE_COMMIT_ARG_RULES_VERSION 18
/* ... and of a cart primary's items for its order log entry ("" for every other commit;
 * orderlog.h; the last: STORE_COMMIT_NARGS) */
#define STORE_COMMIT_ARG_ITEMS 19

/* lua/commit_body.lua: {code, value[, ...]}. */
/* {1, stock left}: the order is written */
#define STORE_COMMIT_OK 1
/* {-1, stock left}: not enough */
#define STORE_COMMIT_SHORT (-1)
/* {-3, segment version}: not at the order's version */
#define STORE_COMMIT_VERSION (-3)
/* {-4, 0}: the claim expired (another request may own the key) */
#define STORE_COMMIT_EXPIRED (-4)
/* {-5, 0}: a counter or sver that is not an integer (or, limit checked here, the limit or the
 * user's entries) */
#define STORE_COMMIT_DAMAGED (-5)
/* {-6, sale_start}: the sale has not started (Redis's clock) */
#define STORE_COMMIT_NOT_STARTED (-6)
/* {-7, sale_end}: the sale has ended */
#define STORE_COMMIT_ENDED (-7)
/* {-8, entries}: the order log holds its cap of entries (the sink is behind): nothing written */
#define STORE_COMMIT_LOG_FULL (-8)
/* {-9, limit, held, open}: the user's limit (checked in the commit, one Redis) would be passed:
 * nothing written; open: the user's entries the commit could not settle, the two-step path's
 * refusal looks for their orders: not known to have committed (a reservation's, whose order may
 * never commit), or known committed in an unknown segment (a reservation's settled since: its
 * order may have ended) */
#define STORE_COMMIT_LIMIT (-9)
/* {-10, segment's rules version}: the order was judged by older sale rules than a PATCH pushed
 * to the segment (lua/rules_push.lua): nothing written; re-read the rules and try again */
#define STORE_COMMIT_RULES (-10)

/* lua/cancel.lua: {code[, record]}. */
/* {1, record}: cancelled now */
#define STORE_CANCEL_DONE 1
/* {0}: no such order */
#define STORE_CANCEL_NONE 0
/* {-1, record}: was already cancelled */
#define STORE_CANCEL_ALREADY (-1)
/* {-2, record}: a hold that expired (now or before) */
#define STORE_CANCEL_EXPIRED (-2)

/* lua/confirm.lua: {code[, record]}. */
/* {1, record}: confirmed now */
#define STORE_CONFIRM_DONE 1
/* {2, record}: was confirmed already (a repeat) */
#define STORE_CONFIRM_ALREADY 2
/* {0}: no such order */
#define STORE_CONFIRM_NONE 0
/* {-1, record}: cancelled */
#define STORE_CONFIRM_CANCELLED (-1)
/* {-2, record}: expired (now or before) */
#define STORE_CONFIRM_EXPIRED (-2)
/* {-3, record}: never a hold */
#define STORE_CONFIRM_NOT_RESERVED (-3)

/* lua/extend.lua: {code[, ...]}, a hold's extension (docs/design.md "Holds and their expiry"). */
/* {1, record}: extended now (the record with its new expires_at and extensions) */
#define STORE_EXTEND_DONE 1
/* {0}: no such order (or a part's id) */
#define STORE_EXTEND_NONE 0
/* {-1, record}: cancelled */
#define STORE_EXTEND_CANCELLED (-1)
/* {-2, record[, 1]}: expired (1: by this call, which found it due) */
#define STORE_EXTEND_EXPIRED (-2)
/* {-3, record}: confirmed, or never a hold */
#define STORE_EXTEND_NOT_RESERVED (-3)
/* {-4}: the SKU's hold_extend_s is 0: its holds cannot be extended */
#define STORE_EXTEND_OFF (-4)
/* {-5, record, most}: extended hold_extend_max times already */
#define STORE_EXTEND_LIMIT (-5)
/* {-6, hold_extend_s}: more seconds asked than one extension may add */
#define STORE_EXTEND_TOO_LONG (-6)
/* {-7, rules version}: the limits given (a Redis Cluster) are older than the segment's rules */
#define STORE_EXTEND_RULES (-7)
/* hold_extend_max 0 with hold_extend_s set: this many extensions (rules_table.h) */
#define STORE_EXTEND_DEFAULT_MAX 3

/* lua/user_reserve.lua: {code, ...}. */
/* {1, expiry, now}: reserved (or reserved already by this request) until expiry */
#define STORE_RESERVE_OK 1
/* {2, 0, now}: the SKU has no limit now: nothing reserved */
#define STORE_RESERVE_FREE 2
/* {0}: no such SKU */
#define STORE_RESERVE_NO_SKU 0
/* {-1, limit, held, segments to search, hex, expiry, past, ...}: over the limit; the entries
 * listed (at most 8) are to be looked for in the segments (user_resolve.lua): past "1" when past
 * their commit deadline or known committed (expiry 0), "0" still within it */
#define STORE_RESERVE_OVER (-1)
/* {-2, sale_start, now}: the sale has not started */
#define STORE_RESERVE_NOT_STARTED (-2)
/* {-3, sale_end, now}: the sale has ended */
#define STORE_RESERVE_ENDED (-3)

/* lua/part_follow.lua: {code}, a multi-segment order's part taking its primary's change. */
/* {1}: the part took the status now */
#define STORE_FOLLOW_DONE 1
/* {2}: left alone: already ended (cancelled, expired), already at it, or not a hold to confirm */
#define STORE_FOLLOW_LEFT 2
/* {0}: no such part record */
#define STORE_FOLLOW_NONE 0

/* lua/part_undo.lua: {code}, a part of a multi-segment order that never came to exist. */
/* {1}: its record removed now (and its units back when it was live) */
#define STORE_UNDO_DONE 1
/* {0}: no such part record (undone already, or never written): its id is tombstoned */
#define STORE_UNDO_NONE 0
/* {2}: asked about a primary ("primary"): its record exists, nothing written */
#define STORE_UNDO_WHOLE 2
/* How long part_undo.lua keeps a tombstone (ms): past any lease (--lock-lease-ms is at most an
 * hour) and any drift between masters' clocks, so no commit of the id can still be on its way */
#define STORE_UNDONE_KEEP_MS 86400000

/* lua/idem_claim.lua: {code, value, ...}. */
/* {0, value}: taken (an order id, or pending and alive) */
#define STORE_CLAIM_TAKEN 0
/* {1, value, expiry}: claimed for this request */
#define STORE_CLAIM_OWNED 1
/* {2, value, segments, hwm}: pending and expired: the caller may look for its order in segments
 * [0, max(segments, hwm)) and take it over */
#define STORE_CLAIM_EXPIRED 2
/* {3, value}: a ticket's claim (docs/design.md "The ticket and the order") holding an order or
 * pending for a request with another Idempotency-Key (or none): the ticket is used */
#define STORE_CLAIM_TICKET_USED 3
/* {4, ""}: a ticket's claim not made: Redis's clock is past the ticket's expiry */
#define STORE_CLAIM_TICKET_EXPIRED 4

/* lua/idem_takeover.lua: {code, ...}. */
/* {0}: the claim changed meanwhile */
#define STORE_TAKEOVER_CHANGED 0
/* {1, order id}: the claim names the order found */
#define STORE_TAKEOVER_ADOPTED 1
/* {2, value, expiry}: now this request's */
#define STORE_TAKEOVER_OWNED 2
/* {3}: a ticket's claim not taken: Redis's clock is past the ticket's expiry */
#define STORE_TAKEOVER_TICKET_EXPIRED 3

/* lua/idem_swap.lua. */
/* the claim holds another value: nothing written */
#define STORE_SWAP_NOT_OURS 0
/* swapped (or deleted) */
#define STORE_SWAP_DONE 1

/* The waiting room's scripts (lua/gate_join.lua, gate_admit.lua: {code, ...}; gate_store.h). */
/* admit: stepped; join: a new place */
#define STORE_GATE_OK 1
/* join: the user had a place already: the same one */
#define STORE_GATE_AGAIN 2
/* the SKU's queue_rate is 0 (no waiting room): nothing written */
#define STORE_GATE_NO_ROOM 0
/* no such SKU, or deleted: nothing written */
#define STORE_GATE_NO_SKU (-1)
/* Places one admission step admits at most (the rest waits for the next step; the allowance
 * banks at most one second's worth anyway) */
#define STORE_GATE_STEP_MAX 10000
/* A place's score in the line (inv:2:{S}:q:line) from this on is a join after the start (or in
 * FIFO mode): 2^52 + seq; below it, a join before the start (seq - 2^52 until the start's
 * shuffle, then its 52-bit shuffle key: lua/include/gate_start.lua) */
#define STORE_GATE_LATE_BASE 4503599627370496
/* Places the start's shuffle rescores in one script at most (a bounded step: Redis serves others
 * between two; admissions wait until the last one is done) */
#define STORE_GATE_SHUFFLE_STEP 4000
/* The rules' defaults: queue_ticket_ttl_s 0 is this many seconds, queue_admit_pct 0 this k */
#define STORE_GATE_TTL_DEFAULT_S 120
#define STORE_GATE_PCT_DEFAULT 150

/* lua/gate_used.lua: {code[, order id]}. */
/* {1}: the ticket is marked used now */
#define STORE_GATE_USED_DONE 1
/* {2, order id}: marked before (by that order): nothing written */
#define STORE_GATE_USED_ALREADY 2
/* {0}: the user was never admitted: nothing written */
#define STORE_GATE_USED_NONE 0

#endif
