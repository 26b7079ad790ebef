/*
 * lockcore, one asynchronous lock whichever backend holds it (issue 31): a small table of
 * functions (lc_anylock_ops) that each backend implements over its own handle, and one handle,
 * lc_anylock, that a caller holds without asking which backend is behind it. The backends:
 *
 *   lc_anylock_redis    lc_async_lock on the data store itself (one Redis, or a Redis Cluster:
 *                       the client decides); the acquire reads the keys in its own script, the
 *                       commit is an owner-fenced script (lc_fenced_script_new).
 *   lc_anylock_redlock  lc_async_redlock over independent masters (lockcore_async.h);
 *   lc_anylock_mysql    lc_mysql_lock, GET_LOCK (lockcore_mysql.h, library lockcore_mysql);
 *   lc_anylock_zk       lc_zk_lock, ZooKeeper's ephemeral sequential nodes (lockcore_zk.h).
 *
 * The last three live apart from the data store: their acquire is followed by an MGET of the
 * keys to read on the store, and their commit is a token-fenced script
 * (lc_token_fenced_script_new) run on the store with the hold's fencing token at
 * "<lock name>:seen" (the same fenced-eval code for the three, and lc_anylock_eval_detached's).
 * A backend's renewal is its own (lease timers, MySQL's ownership checks, ZooKeeper's session):
 * the table has no renew entry; lc_anylock_lost says what renewal found.
 *
 * Adding a backend: a table (its file), its declaration beside its handle's API, and the place
 * where the caller picks one (inventoryd: seglock.c's backend_of).
 *
 * Callback contract: lockcore_async.h's (a call that returns LC_OK calls its callback exactly
 * once, from the loop; lc_anylock_free calls the callback of an operation in flight with
 * LC_ESTATE from inside the free). One operation at a time per handle (another is LC_ESTATE).
 */
#ifndef LOCKCORE_LOCKCORE_ANYLOCK_H
#define LOCKCORE_LOCKCORE_ANYLOCK_H

#include "lockcore/lockcore_async.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lc_anylock lc_anylock;
typedef struct lc_anylock_ops lc_anylock_ops;

/* Where the locks of one backend live (borrowed: every client outlives the handles made on it,
 * and the token-fenced commits sent under them). */
typedef struct lc_anylock_backend {
    const lc_anylock_ops *ops;
    void *client;                  /* the backend's client: lc_async_client (redis),
                                      lc_mysql_client, lc_zk_client; unused by Redlock */
    lc_async_client *const *nodes; /* Redlock: its n node clients */
    int n;
    int node_timeout_ms;    /* Redlock: lc_redlock_opts.node_timeout_ms */
    lc_async_client *store; /* the data store: the reads and the commits go there */
} lc_anylock_backend;

/* The table a backend implements over its handle h (what make made). An operation that starts
 * (LC_OK) reports exactly once, from the loop, to lc_anylock_acquired or lc_anylock_evaluated
 * (an eval or a release) with the al it was given. */
struct lc_anylock_ops {
    const char *kind;      /* "redis", "redlock", "mysql", "zookeeper" (lc_anylock_kind) */
    int token_fenced;      /* 1: apart from the store (MGET after the acquire, token commits) */
    int closed_with_nodes; /* 1: a handle must be closed before its clients are freed
                              (lc_anylock_close): Redlock, ZooKeeper */
    /* A handle of the lock called name: opts' lease_ms, watchdog, max_hold_ms where the
     * backend has them. No server call. */
    lc_status (*make)(const lc_anylock_backend *b, const char *name, const lc_lock_opts *opts,
                      void **h);
    void (*free)(void *h); /* as the backend's free: a hold is released in the background */
    /* Takes the lock within wait_ms (0: one try); not token_fenced: reads the nread keys in the
     * same step (values to lc_anylock_acquired), else nread is 0. */
    lc_status (*acquire)(void *h, int wait_ms, int nread, const char *const *reads, lc_anylock *al);
    lc_status (*release)(void *h, lc_anylock *al); /* drops one hold */
    /* The fenced commit (flags 0 or LC_EVAL_RELEASE): store and seen_key unused when not
     * token_fenced. */
    lc_status (*eval)(void *h, lc_async_client *store, const char *seen_key,
                      const lc_script *script, int flags, int nkeys, const char *const *keys,
                      int nargs, const char *const *args, lc_anylock *al);
    /* Whether a commit may be sent under h outside its one-operation rule now: LC_OK, or the
     * refusal (LC_ENOTHELD, LC_ELOST, LC_EIO) with nothing sent. Not token_fenced: unused. */
    lc_status (*detach_check)(const lc_anylock_backend *b, const void *h);
    /* Raises the token source of the lock called name past seen (a commit refused with it). */
    lc_status (*raise)(const lc_anylock_backend *b, const char *name, uint64_t seen);
    int (*held)(const void *h);
    int (*lost)(const void *h);
    uint64_t (*fence)(const void *h);
    const char *(*owner)(const void *h); /* the acquisition's id beside the token ("" if none) */
    const char *(*errmsg)(const void *h);
    /* Not token_fenced: lc_async_eval_detached over h. */
    lc_status (*eval_detached)(void *h, const lc_script *script, int nkeys, const char **keys,
                               int nargs, const char **args, lc_async_reply_fn cb, void *arg);
};

/* The backends of liblockcore (lockcore_mysql.h and lockcore_zk.h declare theirs). */
extern const lc_anylock_ops lc_anylock_redis;
extern const lc_anylock_ops lc_anylock_redlock;

/* Result of lc_anylock_acquire: st as the backend's acquire, or, for a token-fenced backend
 * whose read of the keys failed, LC_EIO (LC_ESTATE when freed) with the hold given back.
 * values: with LC_OK, an array reply with one element per read key (borrowed); else NULL. */
typedef void (*lc_anylock_acquire_fn)(lc_anylock *lock, lc_status st, const redisReply *values,
                                      void *arg);
/* Result of lc_anylock_eval (reply: the body's, borrowed) or lc_anylock_release (reply NULL). */
typedef void (*lc_anylock_eval_fn)(lc_anylock *lock, lc_status st, const redisReply *reply,
                                   void *arg);

/* A new owner of the lock called name on backend b (copied; no server call). LC_OK with *out,
 * else *out is NULL. */
lc_status lc_anylock_new(const lc_anylock_backend *b, const char *name, const lc_lock_opts *opts,
                         lc_anylock **out);
/* Frees the handle: an operation in flight ends with LC_ESTATE from inside this call, a hold is
 * released in the background. NULL-safe. */
void lc_anylock_free(lc_anylock *lock);
/* Before the backend's clients are freed (closed_with_nodes): frees the backend's handle (as
 * lc_anylock_free does); the handle's later calls answer LC_ESTATE. Otherwise nothing. */
void lc_anylock_close(lc_anylock *lock);

/* Takes the lock (waiting up to wait_ms) and reads the nread keys (strings, copied) of the data
 * store. */
lc_status lc_anylock_acquire(lc_anylock *lock, int wait_ms, int nread, const char *const *reads,
                             lc_anylock_acquire_fn cb, void *arg);
/* Drops one hold (cb may be NULL). */
lc_status lc_anylock_release(lc_anylock *lock, lc_anylock_eval_fn cb, void *arg);
/* Runs the commit script (lc_fenced_script_new for redis, lc_token_fenced_script_new for the
 * others; alive until the callback) under the hold; flags 0 or LC_EVAL_RELEASE. LC_ELOST: a
 * later holder's token (or another owner) was seen. */
lc_status lc_anylock_eval(lc_anylock *lock, const lc_script *script, int flags, int nkeys,
                          const char **keys, int nargs, const char **args, lc_anylock_eval_fn cb,
                          void *arg);
/* As lc_async_eval_detached: the commit without release, outside the one-operation rule, so the
 * hold can be handed on before its reply comes; a token-fenced refusal raises the backend's
 * token source past the seen token. */
lc_status lc_anylock_eval_detached(lc_anylock *lock, const lc_script *script, int nkeys,
                                   const char **keys, int nargs, const char **args,
                                   lc_async_reply_fn cb, void *arg);

int lc_anylock_held(const lc_anylock *lock);
int lc_anylock_lost(const lc_anylock *lock); /* 1 when renewal found it lost, or closed */
uint64_t lc_anylock_fence(const lc_anylock *lock);
const char *lc_anylock_kind(const lc_anylock *lock); /* the backend's name */
/* The message of the last acquire, eval or release that failed ("" after a success), as
 * lc_async_lock_errmsg. */
const char *lc_anylock_errmsg(const lc_anylock *lock);

/* For backends: the result of an operation started with al (why: the backend handle's message
 * of it, lc_*_errmsg). A release reports to lc_anylock_evaluated with reply NULL. */
void lc_anylock_acquired(lc_anylock *al, lc_status st, const redisReply *values, const char *why);
void lc_anylock_evaluated(lc_anylock *al, lc_status st, const redisReply *reply, const char *why);

#ifdef __cplusplus
}
#endif

#endif /* LOCKCORE_LOCKCORE_ANYLOCK_H */
