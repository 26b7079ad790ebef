/*
 * Redis access for the service: the key names of docs/design.md, the scripts of
 * store_scripts.h and the calls on a worker loop's asynchronous lockcore client (each loop
 * has its own, connected on demand, so inventoryd starts without Redis).
 */
#ifndef INVENTORY_STORE_H
#define INVENTORY_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <lockcore/lockcore.h>
#include <lockcore/lockcore_async.h>

#include "config.h"
#include "rules.h"
#include "store_keys_gen.h"

enum store_script {
    SCRIPT_PUT_META,
    SCRIPT_DELETE_META,
    SCRIPT_LAYOUT_READ,
    SCRIPT_LAYOUT_DONE,
    SCRIPT_SEG_RESET,
    SCRIPT_SEG_DROP,
    SCRIPT_SEG_STATUS,
    SCRIPT_RESTOCK_BEGIN,
    SCRIPT_RESTOCK_APPLY,
    SCRIPT_RESTOCK_END,
    SCRIPT_RESTOCK_STATE,
    SCRIPT_COMMIT, /* fenced: run with lc_lock_eval */
    SCRIPT_COMMIT_ATOMIC,
    SCRIPT_CANCEL,
    SCRIPT_IDEM_CLAIM,
    SCRIPT_IDEM_TAKEOVER,
    SCRIPT_IDEM_SWAP,
    SCRIPT_VER_RAISE,
    SCRIPT_CONFIRM,
    SCRIPT_EXPIRE,
    SCRIPT_USER_RESERVE,
    SCRIPT_USER_RESOLVE,
    SCRIPT_USER_RELEASE,
    SCRIPT_PATCH_RULES,
    SCRIPT_MULTI_BEGIN,
    SCRIPT_CART_BEGIN, /* a cart's intent (order_cart.c) */
    SCRIPT_PART_FOLLOW,
    SCRIPT_PART_UNDO,
    SCRIPT_MULTI_DUE,
    SCRIPT_HOLDS_DUE,
    SCRIPT_RULES_PUSH,
    SCRIPT_STATUS_READ, /* one Redis only: the keys span several slots */
    SCRIPT_GATE_JOIN,   /* the waiting room's (gate_store.h) */
    SCRIPT_GATE_ADMIT,
    SCRIPT_GATE_PLACE,
    SCRIPT_GATE_USED,
    SCRIPT_EXTEND,        /* a hold's extension (lua/extend.lua) */
    SCRIPT_GROUP_RESERVE, /* limit groups' (docs/design.md "Limit groups") */
    SCRIPT_GROUP_PUT,
    SCRIPT_GROUP_READ,
    SCRIPT_COUNT
};

/* Key schema 2 (docs/design.md): every key starts "inv:2:"; a SKU's own keys carry the hash tag
 * {<sku>}, segment k's keys {<sku>/<k>}. '/' is not allowed in a SKU name (SPEC §5), so the tag
 * of one SKU's segment can never be another SKU's tag, whatever the names contain (schema 1 used
 * {<sku>:<k>}, and SKU "x:1" met segment 1 of SKU "x"). Schema-1 keys ("inv:{") are not read.
 * The prefix, the separator and every name come from the schema's one list,
 * service/store_keys.txt (store_keys_gen.h, made by cmake/embed_keys.cmake). */
#define STORE_KEY_PREFIX STORE_KEYS_PREFIX
#define STORE_SEG_SEP STORE_KEYS_SEG_SEP

/* Longest key this file builds: "inv:2:{" + 64-byte SKU + "/" + 4-digit segment + "}:" + suffix
 * (+ a 128-byte Idempotency-Key for claims). */
#define STORE_KEY_MAX 256

/* The keys of one segment: a field for each segment row of the key schema named by a plain
 * word (stock, sver, rver, cnt, log, due, give, orders, follow, undone, idem, rst, lock). */
struct seg_keys {
#define STORE_SEG_KEY_FIELD_(name) char name[STORE_KEY_MAX];
    STORE_KEYS_SEG_FIELDS(STORE_SEG_KEY_FIELD_)
#undef STORE_SEG_KEY_FIELD_
};

struct store;

/* Makes the store (the scripts; no connection). 0, or -1 with err set. */
int store_new(const struct config *cfg, struct store **out, char *err, size_t errlen);
void store_free(struct store *store);

/* The script made from store_scripts.h (borrowed). */
const lc_script *store_script(struct store *store, enum store_script id);

/* Fills the keys of segment k of sku. */
void store_seg_keys(const char *sku, int k, struct seg_keys *out);

/* A call of the commit script (lua/commit_body.lua), its KEYS and ARGV in the order the script
 * reads them: the one place that knows that layout, for a one-segment order (order_fsm.c) and
 * for each part of a multi-segment one (order_multi.c). The strings of in are borrowed: keep
 * them alive while call is used. */
#define STORE_COMMIT_NKEYS 12
#define STORE_COMMIT_NARGS 19
struct store_commit_in {
    const char *sku;
    int k;
    int64_t version;
    long long qty; /* units taken from this segment */
    const char *id, *record;
    const char *idem;   /* "" none */
    const char *expiry; /* Redis ms of the key claim / reservation / intent, "0" none */
    const struct sku_rules *rules;
    int log_cap;       /* 0: no order log entry */
    const char *user;  /* "" none */
    const char *kind;  /* NULL or "": a one-segment order; "part" or "primary" */
    const char *parts; /* a primary's "k:q,..." */
    long long total;   /* a primary's units in all its parts */
    /* a cart's primary (kind "primary"): the cart's items for its order log entry,
     * "<sku>:<k>:<q>,..." of every part of every item, home item first, as
     * orderlog_items_add builds it (orderlog.h); NULL or "" for every other commit (its entry
     * then has no items field) */
    const char *items;
    /* the user's limit checked in the commit (one Redis, a one-segment order): the SKU's users
     * and meta keys and the order's hex; NULL users: not checked here */
    const char *users, *meta, *hex;
    /* 1 on one Redis: a hold's commit registers its segment in the hold index
     * (store_holds_key), KEYS[10]; never on a Redis Cluster (another slot) */
    int hold_index;
};
struct store_commit_call {
    struct seg_keys sk;
    char ver[24], qty[24], cap[24], seg[24], total[24], rver[24];
    char rules[RULES_N][24]; /* the rules the commit is given (rules_table.h's arg column) */
    char users[STORE_KEY_MAX], meta[STORE_KEY_MAX]; /* KEYS[10], [11] when only [12] is needed */
    const char *keys[STORE_COMMIT_NKEYS];
    const char *args[STORE_COMMIT_NARGS];
    int nkeys; /* 9, 11 with the user's limit checked in the commit, 12 with the hold index */
    int nargs; /* STORE_COMMIT_NARGS: the last two are the rules' version (rules->version)
                  and the cart's items (in->items, "" none) */
};
void store_commit_call(const struct store_commit_in *in, struct store_commit_call *c);

/* Writes "inv:2:{sku}:<suffix>" into buf (STORE_KEY_MAX). */
void store_sku_key(char *buf, const char *sku, const char *suffix);

/* Writes a user's own key "inv:2:{@<user>}:<suffix>" into buf (STORE_USER_KEY_MAX bytes): the
 * per-user request rate (userrate.h). The tag is '@' and the user id ('@' is in no SKU name, so
 * no SKU's key is ever a user's), so each user's keys sit in one slot; user ids of up to 128
 * printable bytes fit. */
#define STORE_USER_KEY_MAX (STORE_KEY_MAX + 32)
void store_user_key(char *buf, const char *user, const char *suffix);

/* Writes a limit group's key "inv:2:{G=<group>}:<suffix>" into buf (STORE_KEY_MAX): its meta
 * (limit, ver) and its users' entries (docs/design.md "Limit groups"). The tag is "G=" and the
 * group name: '=' is in no SKU name (SPEC §5), so no SKU's key, SKU-wide or a segment's, can
 * ever be a group's, whatever the two names are ("{G:x}" could: "G:x" is a SKU name). */
void store_group_key(char *buf, const char *group, const char *suffix);

/* The SKU registry's key, "inv:2:skus": a set of the SKU names a PUT created (docs/design.md).
 * No hash tag: on a cluster it is a slot of its own, never in a script with a SKU's keys.
 * Static string. */
const char *store_registry_key(void);

/* The hold index's key, "inv:2:holds" (one Redis only; docs/design.md "The sweeper"): a sorted
 * set of the segments that may hold holds, member "<sku>/<k>", score = the Redis ms at which
 * the sweeper must look at the segment next (never later than its earliest hold's expiry).
 * Written by the commit of a hold and by the expiry sweep (lua/expire.lua), in the same step as
 * the segment's due set. Static string. */
const char *store_holds_key(void);

/* ---- the asynchronous store (on a worker loop's lockcore client) ----
 *
 * Every call below calls its callback exactly once, on the loop, and never from inside the
 * call itself: one that could not start (lockcore refused it: bad arguments, out of memory)
 * calls back on the loop's next turn, with the status and message of that refusal (copied when
 * it happened). Two exceptions, where there is no next turn to wait for: LC_ESTATE (the client
 * is being freed at the loop's end, when lc_async_client_free ends every operation inside
 * itself) and running out of memory for the call's own record.
 *
 * ar (may be NULL): the request the call is for. Its callback then runs with the request's id
 * on its log lines (log_ctx_begin/log_ctx_end around it: written here once, for every store
 * callback; struct areq stays opaque here). */
struct areq;
struct store_conns;

/* The longest failure message a store callback is given for a call that did not start. */
#define STORE_WHY_MAX 256

/* One reply of a batch, as much of it as the callers use (the reply itself is freed by
 * lockcore once its callback returns): its type, its integer value (store_reply_int, 0 when
 * none) and, for an array, the integer values of its first STORE_ITEM_MAX elements. */
#define STORE_ITEM_MAX 6
struct store_item {
    int type;
    long long v;
    int n; /* elements of an array reply */
    long long e[STORE_ITEM_MAX];
};

/* Fills it from the reply r, as a batch fills its items. */
void store_item_of(const redisReply *r, struct store_item *it);

/* Called once every call of a batch is answered: failed is NULL when all were answered, else
 * the message of the first that failed (no answer, or a Redis error), borrowed for the call, as
 * are items[0..n). A call Redis answered with an error has type REDIS_REPLY_ERROR (scripts check
 * before their first write: it changed nothing); one with no answer has type 0. */
typedef void (*store_batch_fn)(void *arg, const char *failed, const struct store_item *items,
                               int n);

/* Runs script id n times on lc (call i: keys keys[i*nkeys..], args args[i*nargs..], copied),
 * pipelined: they leave in one write; conns (may be NULL) notes where they ran. cb as above. */
void store_batch_async(struct store *store, lc_async_client *lc, const struct areq *ar,
                       enum store_script id, int n, int nkeys, const char *const *keys, int nargs,
                       const char *const *args, struct store_conns *conns, store_batch_fn cb,
                       void *arg);

/* One script call on lc; cb as for lc_async_script. A call that did not start gets
 * lc_async_script's status: never LC_EIO, which says the script may have run. */
void store_script_async(struct store *store, lc_async_client *lc, const struct areq *ar,
                        enum store_script id, int nkeys, const char *const *keys, int nargs,
                        const char *const *args, lc_async_reply_fn cb, void *arg);

/* One plain command on lc (argv copied); cb as for lc_async_command. */
void store_command_async(lc_async_client *lc, const struct areq *ar, int argc,
                         const char *const *argv, lc_async_reply_fn cb, void *arg);

/* The connections (so the masters) that carried a request's commands, for the WAITs that
 * vouch for them (--redis-replica-acks): a WAIT counts the replicas that have everything its
 * connection saw on its master, reads as well as writes, and vouches for nothing on any other
 * connection (lockcore_async.h, lc_async_wait). */
#define STORE_CONNS_MAX 16
struct store_conns {
    lc_async_conn_ref ref[STORE_CONNS_MAX];
    int n;
    int overflow; /* more connections than ref holds: the WAITs cannot cover them all */
};

/* Inside a reply callback on lc: notes the connection that carried the reply (once each).
 * cs may be NULL (nothing noted). A callback without a reply notes nothing: its caller fails
 * on that reply anyway. */
void store_conns_note(struct store_conns *cs, const lc_async_client *lc);

/* The replicas a WAIT reached, or -1 when it failed. */
long long store_reply_acks(lc_status st, const redisReply *r);

/* With --redis-replica-acks acks > 0: WAIT acks on the connection ref (lc_async_wait), so the
 * writes it carried are on acks replicas before they are acknowledged. WAIT blocks that
 * connection in Redis, so its timeout is a quarter of redis_timeout_ms: commands pipelined
 * behind it keep their own deadline. A connection closed or replaced since answers LC_EIO (the
 * writes' fate is unknown), and so does a WAIT that could not start. cb as for
 * lc_async_command (as above, without a request context: the caller brackets its own);
 * store_reply_acks reads its answer. */
void store_replica_wait_ref_async(lc_async_client *lc, const lc_async_conn_ref *ref, int acks,
                                  int redis_timeout_ms, lc_async_reply_fn cb, void *arg);

/* store_replica_wait_ref_async on every connection of cs at once. cb gets the fewest replicas
 * any WAIT reached, -1 when one failed or cs overflowed, acks when cs is empty (nothing was
 * carried); cb and ar as above (an answer known at once comes on the next turn too). */
typedef void (*store_acked_fn)(void *arg, long long acks);
void store_replica_wait_conns_async(lc_async_client *lc, const struct areq *ar,
                                    const struct store_conns *cs, int acks, int redis_timeout_ms,
                                    store_acked_fn cb, void *arg);

/* --redis-replica-acks: how many replicas a write must reach before it is vouched for (0:
 * none, nothing is WAITed). */
int store_replica_acks(const struct store *store);

/* store_replica_wait_conns_async with the store's --redis-replica-acks and --redis-timeout-ms. */
void store_replicated_async(struct store *store, lc_async_client *lc, const struct areq *ar,
                            const struct store_conns *cs, store_acked_fn cb, void *arg);

/* Reply helpers: the integer value of an integer or numeric string reply, else dflt. */
long long store_reply_int(const redisReply *r, long long dflt);

#endif
