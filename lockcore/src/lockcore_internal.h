/*
 * Private declarations shared by the lockcore sources: the client's connection pool, the lock
 * structure, the watchdog and the unlock listener. Nothing here is part of the public API.
 */
#ifndef LOCKCORE_INTERNAL_H
#define LOCKCORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lockcore/lockcore.h"

/* ---- errors (status.c) ---- */

/* Records a formatted message as this thread's lc_errmsg() and returns st. */
lc_status lc_fail(lc_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- time ---- */

/* CLOCK_MONOTONIC in milliseconds. */
int64_t lc_now_ms(void);

/* ---- tokens (token.c) ---- */

/* Fills out with 32 lowercase hex digits of a fresh random 128-bit token, NUL-terminated. */
void lc_token_new(char out[33]);

/* A random integer in [0, bound) from a per-thread generator (jitter; not for secrets). */
uint32_t lc_rand_below(uint32_t bound);

/* ---- URL (url.c) ---- */

typedef struct lc_url {
    int unix_socket;   /* 1: path is set; 0: host and port */
    char host[256];
    int port;
    char path[256];
    char user[128];    /* "" when none */
    char password[256];/* "" when none */
    int db;            /* 0 by default */
} lc_url;

/* Parses a Redis URL (forms in lockcore.h). LC_OK or LC_EINVAL with a message. */
lc_status lc_url_parse(const char *url, lc_url *out);

/* ---- connections (client.c) ---- */

typedef struct lc_conn {
    redisContext *ctx;
    struct lc_conn *next;
} lc_conn;

typedef struct lc_notify lc_notify;
typedef struct lc_watchdog lc_watchdog;
typedef struct lc_mux lc_mux;

struct lc_client {
    lc_url url;
    lc_client_opts opts;
    pthread_mutex_t pool_mu;
    lc_conn *idle;        /* LIFO stack of idle connections */
    int nidle;
    lc_notify *notify;    /* made on first wait */
    _Atomic(lc_watchdog *) watchdog; /* made on first hold with watchdog on */
    pthread_mutex_t lazy_mu;
    lc_script *s_acquire, *s_release, *s_renew, *s_force;
    lc_mux *mux;          /* opts.pipeline: the one multiplexed connection */
};

/* ---- the multiplexed connection (mux.c) ---- */

lc_status lc_mux_new(lc_client *client, lc_mux **out);
void lc_mux_free(lc_mux *m);

/* Sends n commands through the multiplexed connection and waits for their replies (new,
 * caller frees). LC_OK (replies may be error replies) or LC_EIO (all replies NULL). *sent (when
 * sent is non-NULL) is 1 when the commands were written to a connection, so a failure may have
 * left them running on the server, and 0 when they never left this process (no connection). */
lc_status lc_mux_exec(lc_mux *m, int n, const int *argcs, const char **const *argvs,
                      const size_t *const *lens, redisReply **replies, int *sent);

/* Runs n commands on the client: through the multiplexed connection, or pipelined on a pooled
 * one. Same contract as lc_mux_exec. */
lc_status lc_exec(lc_client *client, int n, const int *argcs, const char **const *argvs,
                  const size_t *const *lens, redisReply **replies, int *sent);

/* Opens a new connection (connect, AUTH, SELECT, timeouts) into *out: LC_OK, LC_EIO or
 * LC_EREDIS (auth/select refused), with lc_errmsg set. */
lc_status lc_connect(const lc_client *client, redisContext **out);

/* Borrows a connection from the pool (opening one when none is idle). LC_OK or LC_EIO. */
lc_status lc_conn_get(lc_client *client, lc_conn **out);

/* Returns a connection to the pool; broken = 1 closes it instead (after any I/O error). */
void lc_conn_put(lc_client *client, lc_conn *conn, int broken);

/* Maps a hiredis reply (or NULL reply) of a command run on conn to a status, setting the
 * message. *broken is set to 1 when the connection must be dropped. */
lc_status lc_reply_status(redisContext *ctx, const redisReply *reply, int *broken);


/* ---- scripts (script.c) ---- */

/* lc_script_run plus *sent (may be NULL) as for lc_exec: whether the script may have run when
 * the status is LC_EIO. */
lc_status lc_script_call(lc_client *client, const lc_script *script, int nkeys, const char **keys,
                         const size_t *keylens, int nargs, const char **args,
                         const size_t *arglens, redisReply **reply, int *sent);

/* ---- locks (lock.c) ---- */

struct lc_lock {
    lc_client *client;
    pthread_mutex_t mu;       /* serialises this owner's calls */
    char *name;
    size_t name_len;
    char *fence_key;          /* NAME:fence */
    char *channel;            /* NAME:unlock */
    char token[33];
    lc_lock_opts opts;
    int count;                /* local hold count */
    uint64_t fence;           /* fencing token of the current hold */
    atomic_int lost;          /* set by the watchdog */
    int64_t held_since_ms;
    void *wd_entry;           /* watchdog registry entry; guarded by the watchdog's mutex */
    int last_wake;            /* how the last wait of the last acquire ended (enum lc_wake) */
    char errstr[128];
};

/* Records st/the thread's message into lock->errstr and returns st. */
lc_status lc_lock_note(lc_lock *lock, lc_status st);

/* How the last wait inside the handle's last acquire ended: no wait at all, woken by the unlock
 * message, or the fallback poll's timer. Tests tell a wake-up by pub/sub from a lucky poll with
 * it, instead of by how fast the waiter came (which a loaded machine makes slow). */
enum lc_wake { LC_WAKE_NONE = 0, LC_WAKE_UNLOCK, LC_WAKE_POLL };
int lc_lock_last_wake(lc_lock *lock);

/* ---- watchdog (watchdog.c) ---- */

/* Adds a held lock to the client's watchdog (starting it on first use). */
lc_status lc_watchdog_add(lc_client *client, lc_lock *lock);

/* Removes a lock; when it returns no renewal of that lock is in flight or will be sent. */
void lc_watchdog_remove(lc_client *client, lc_lock *lock);

/* Changes the lease the watchdog renews a registered lock with and makes its next renewal due a
 * third of that from now. Waits for a renewal of the lock in flight first, so every renewal sent
 * after it returns carries the new lease: call it before the command that sets the lease in
 * Redis, and no renewal with the old lease can land after that command. */
void lc_watchdog_set_lease(lc_client *client, lc_lock *lock, int lease_ms);

/* Records that Redis confirmed the lock's lease at at_ms (an extend), for the watchdog's
 * judgement of how long its lease may still run when a renewal fails. */
void lc_watchdog_renewed(lc_client *client, lc_lock *lock, int64_t at_ms);

void lc_watchdog_free(lc_watchdog *wd);

/* ---- unlock listener (notify.c) ---- */

typedef struct lc_sub lc_sub;

/* Subscribes to channel through the client's shared listener connection; returns once Redis has
 * confirmed the subscription (so an unlock published after this cannot be missed), waiting at
 * most timeout_ms (and the command timeout) for that. NULL when the listener is unavailable or
 * too slow: the caller then falls back to polling. */
lc_sub *lc_notify_subscribe(lc_client *client, const char *channel, int timeout_ms);

/* Waits until a message arrived on the channel since the last wait (or the subscribe), or
 * timeout_ms passed. Returns 1 when woken by a message, 0 on timeout. */
int lc_notify_wait(lc_sub *sub, int timeout_ms);

/* Drops the subscription. NULL-safe. */
void lc_notify_unsubscribe(lc_sub *sub);

void lc_notify_free(lc_notify *n);

/* The listener's bookkeeping without its thread, for the unit tests (test_notify.c) and as the
 * steps lc_notify_subscribe is made of. */

/* A listener with no thread and no connection that behaves as if connected: what it would send
 * is read with lc_notify_take, what Redis would answer is fed with lc_notify_push. Freed with
 * lc_notify_free. NULL when out of memory. */
lc_notify *lc_notify_new_detached(void);

/* Registers a waiter on channel (queueing a SUBSCRIBE when one is needed) without waiting.
 * NULL when out of memory. Drop it with lc_notify_unsubscribe. */
lc_sub *lc_notify_sub_begin(lc_notify *n, const char *channel);

/* 1 once Redis has confirmed the waiter's subscription (an unlock cannot be missed any more). */
int lc_notify_sub_ready(lc_sub *sub);

/* Takes the oldest queued (UN)SUBSCRIBE: 1 with *subscribe (1 or 0) and the channel name copied
 * into name, 0 when the queue is empty. */
int lc_notify_take(lc_notify *n, int *subscribe, char *name, size_t size);

/* Applies one push message (subscribe, unsubscribe or message confirmation/delivery) as the
 * listener thread does when Redis sends it. */
void lc_notify_push(lc_notify *n, const redisReply *r);

#endif
