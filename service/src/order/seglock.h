/*
 * seglock — the lock of one segment (or of a SKU, single-lock) as the order path uses it:
 * lockcore's lc_anylock (lockcore_anylock.h), one handle whichever backend is behind it. The
 * backend is picked in one place (seglock.c's backend_of) from where the loop's locks live:
 *
 *   redis      lc_async_lock on the data Redis (one Redis or a Cluster): acquire = the acquire
 *              script with the stock reads (one round trip); commit = the fenced script (owner
 *              and fencing token checked by the lock's own Redis).
 *   redlock    (--lock-redis) a Redlock over independent masters; acquire = the Redlock
 *              acquire on the lock nodes, then an MGET of the reads on the data Redis (one
 *              round trip more); commit = the same body as a token-fenced script
 *              (lc_token_fenced_script_new) on the data Redis: accepted only if the Redlock's
 *              fencing token is at least the highest one seen at "<lock name>:seen".
 *   mysql      (--lock-mysql) as Redlock, with lockcore's lc_mysql_lock (GET_LOCK, its token
 *              from the lc_fence counter row) in place of the Redlock.
 *   zookeeper  (--lock-zookeeper) as Redlock, with lockcore's ZooKeeper lock (lc_zk_*) on the
 *              loop's ZooKeeper session: its token is the lock node's creation zxid.
 *
 * Ownership and callbacks follow lockcore_async.h: a call that returns LC_OK calls its callback
 * exactly once, from the loop; seglock_free calls the callback of an operation in flight with
 * LC_ESTATE from inside the free, and releases a hold still held in the background.
 */
#ifndef INVENTORY_SEGLOCK_H
#define INVENTORY_SEGLOCK_H

#include <lockcore/lockcore_anylock.h>
#include <lockcore/lockcore_async.h>
#include <lockcore/lockcore_mysql.h>
#include <lockcore/lockcore_zk.h>

struct seglock;

/* Where the locks live: the loop's data client, and its Redlock node clients (n = 0: none);
 * live: the loop's list of live seglocks (for seglock_close_all). */
struct seglock_env {
    lc_async_client *data;
    lc_async_client *const *nodes;
    int n;
    int node_timeout_ms;
    lc_mysql_client *mysql; /* --lock-mysql: the loop's MySQL lock client (then n = 0), or NULL */
    lc_zk_client *zk;       /* --lock-zookeeper: the loop's ZooKeeper session (NULL: none) */
    struct seglock **live;
};

/* Before the loop's node clients (or ZooKeeper client) are freed: closes the lock of every live
 * seglock of the list whose backend must be closed before its clients (lc_anylock_close:
 * Redlock, ZooKeeper; an operation in flight ends with LC_ESTATE, a hold is released in the
 * background); their later calls answer LC_ESTATE. The seglocks themselves are still freed by
 * their owners. */
void seglock_close_all(struct seglock **live);

typedef void (*seglock_acquired_fn)(struct seglock *sl, lc_status st, const redisReply *values,
                                    void *arg);
typedef void (*seglock_eval_fn)(struct seglock *sl, lc_status st, const redisReply *reply,
                                void *arg);

/* A new owner of the lock called name (no Redis call). LC_OK with *out, else *out is NULL. */
lc_status seglock_new(const struct seglock_env *env, const char *name, const lc_lock_opts *lo,
                      struct seglock **out);
void seglock_free(struct seglock *sl);

/* Takes the lock (waiting up to wait_ms) and reads the nread keys (strings) of the data Redis;
 * values as lc_async_lock_acquire's. */
lc_status seglock_acquire(struct seglock *sl, int wait_ms, int nread, const char *const *reads,
                          seglock_acquired_fn cb, void *arg);

/* Runs the commit script (store.c made it for the lock's kind) under the hold; flags 0 or
 * LC_EVAL_RELEASE. LC_ELOST: a later holder's token (or another owner) was seen. */
lc_status seglock_eval(struct seglock *sl, const lc_script *script, int flags, int nkeys,
                       const char **keys, int nargs, const char **args, seglock_eval_fn cb,
                       void *arg);

/* As lc_async_eval_detached: the commit without release, outside the one-operation rule, so
 * the hold can be handed on before its reply comes. */
lc_status seglock_eval_detached(struct seglock *sl, const lc_script *script, int nkeys,
                                const char **keys, int nargs, const char **args,
                                lc_async_reply_fn cb, void *arg);

/* 1 when renewal found the hold lost. */
int seglock_lost(const struct seglock *sl);

/* The message of the last acquire or eval that failed ("" after a success), borrowed, valid
 * until the next operation ends: read it in the callback (lockcore_async.h: the message travels
 * with the handle, never through lc_errmsg()). */
const char *seglock_errmsg(const struct seglock *sl);

#endif
