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

/* Non-zero while this thread runs lockcore's asynchronous code from an event loop (async.c):
 * a blocking call there would stall the loop, which debug builds assert against. */
extern _Thread_local int lc_in_loop;

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

/* ---- the lock logic of both faces (hold.c) ---- */

/* The built-in scripts of scripts.h, made once per process (shared by every client of both
 * faces; never freed by a caller). NULL only when out of memory at first use. */
typedef enum lc_builtin {
    LC_S_ACQUIRE, LC_S_RELEASE, LC_S_RENEW, LC_S_FORCE, LC_S_RAISE, LC_S_COUNT
} lc_builtin;
const lc_script *lc_builtin_script(lc_builtin which);

/* One owner's view of its hold of one lock name: what both lc_lock and lc_async_lock are
 * built on. Name, token and options are immutable once made; count and fence are the face's
 * (under its mutex, or on its loop thread); lost may be set by a renewer at any time. */
typedef struct lc_hold {
    char *name;
    size_t name_len;
    char *fence_key;          /* NAME:fence */
    char *channel;            /* NAME:unlock */
    char token[33];
    lc_lock_opts opts;
    int count;                /* local hold count */
    uint64_t fence;           /* fencing token of the current hold */
    atomic_int lost;          /* set by the renewer */
    int64_t held_since_ms;
} lc_hold;

/* Validates name and opts (NULL: defaults) and fills h with copies and a fresh owner token.
 * LC_OK, LC_EINVAL or LC_ENOMEM (h then needs no lc_hold_clear). */
lc_status lc_hold_init(lc_hold *h, const char *name, const lc_lock_opts *opts);
void lc_hold_clear(lc_hold *h);

/* LC_OK when the handle holds the lock, else LC_ENOTHELD with a message. */
lc_status lc_hold_need(const lc_hold *h);

/* Forgets the local hold (the face stops its renewal). */
void lc_hold_drop(lc_hold *h);

/* What a successful acquire reply said. */
typedef struct lc_acquired {
    uint64_t fence;
    int count;
    int fresh;                /* a new hold (not a re-entry): the face (re)starts renewal */
    int64_t pttl;             /* LC_EBUSY: the holder's remaining lease */
} lc_acquired;

/* Interprets the acquire script's reply (st is the transport's status; r the reply when
 * LC_OK). LC_OK (taken; *out filled), LC_EBUSY (out->pttl), or an error. Changes nothing:
 * the face stops any old renewal, then calls lc_hold_start (fresh) or sets count. */
lc_status lc_hold_on_acquire(const lc_hold *h, lc_status st, const redisReply *r, int nread,
                             lc_acquired *out);

/* Starts a fresh hold: fence, count, since-when, not lost. */
void lc_hold_start(lc_hold *h, const lc_acquired *a);

/* The values of the read keys of an acquire reply: drops the first three elements of r in
 * place and returns r. */
redisReply *lc_acquire_values(redisReply *r);

/* Applies the release script's reply (or the failure to get one) to the hold and returns the
 * call's status. *dropped = 1 when the hold is gone (the face stops renewal). The face stops
 * renewal *before* sending the release of the last hold. */
lc_status lc_hold_on_release(lc_hold *h, lc_status st, const redisReply *r, int *dropped);

/* Applies a fenced script's reply: LC_ELOST (stale fence: marked lost, dropped), LC_OK
 * (*reply, when asked, stolen from r; one hold dropped with release), ... *release_alone = 1:
 * the body failed (LC_EREDIS) before it released, so the face must run the release itself. */
lc_status lc_hold_on_eval(lc_hold *h, int release, lc_status st, redisReply *r,
                          redisReply **reply, int *dropped, int *release_alone);

/* Arguments of lc_lock_eval/lc_async_eval: LC_OK or LC_EINVAL. */
lc_status lc_eval_check(const lc_script *script, int flags, int nkeys, const char **keys,
                        int nargs, const char **args);

/* A renewal's outcome: 1 renewed, 0 not the owner any more, -1 unknown (no reply / error). */
int lc_renew_result(lc_status st, const redisReply *r);
enum { LC_RENEW_OK, LC_RENEW_RETRY, LC_RENEW_LOST };
/* What to do after a renewal: go on (OK), retry soon (unknown, but the last confirmed lease
 * may still run), or mark the lock lost. */
int lc_renew_verdict(int result, int64_t now_ms, int64_t renewed_ms, int lease_ms);
int lc_renew_period_ms(int lease_ms);
enum { LC_RENEW_RETRY_MS = 50 };

/* Milliseconds from base to base*2 (jitter), for the fallback poll of a waiter. */
int lc_jitter_ms(int base);

/* Fallback poll interval bounds while waiting: with the unlock listener the poll only covers a
 * lost message, so it is slow; without it the poll is all there is, so it starts fast. */
enum { LC_POLL_SUBSCRIBED_MIN_MS = 200, LC_POLL_SUBSCRIBED_MAX_MS = 1000,
       LC_POLL_ALONE_MIN_MS = 10, LC_POLL_ALONE_MAX_MS = 200 };

/* A script call's keys and args, built from a hold by lc_call_*: the same arguments whichever
 * face sends them. Pointers into the hold and the caller's arrays (borrowed: keep them alive
 * until the call is sent). Free with lc_call_done. Not movable (points into itself). */
enum { LC_CALL_INLINE = 16 };
typedef struct lc_call {
    const lc_script *script;
    int nkeys, nargs;
    const char **keys, **args;
    size_t *keylens, *arglens;
    const char *kv[LC_CALL_INLINE], *av[LC_CALL_INLINE];
    size_t kl[LC_CALL_INLINE], al[LC_CALL_INLINE];
    char lease[16], held[16], fence[24];
} lc_call;

lc_status lc_call_acquire(lc_call *c, const lc_hold *h, int nread, const char *const *read_keys,
                          const size_t *read_keylens);
/* The release script for a handle holding `holds` (its count before this release; count + 1
 * is the undo of an acquire whose reply was lost). */
lc_status lc_call_release(lc_call *c, const lc_hold *h, int holds);
lc_status lc_call_renew(lc_call *c, const lc_hold *h, int lease_ms);
lc_status lc_call_force(lc_call *c, const char *name, const char *channel);
/* Redlock's fence raise (scripts.h LC_LUA_FENCE_RAISE) of the quorum's token on one node. */
lc_status lc_call_raise(lc_call *c, const lc_hold *h, uint64_t fence);
/* The fencing guard's arguments around the caller's keys and args (release: drop one hold). */
lc_status lc_call_eval(lc_call *c, const lc_hold *h, const lc_script *script, int release,
                       int nkeys, const char **keys, const size_t *keylens, int nargs,
                       const char **args, const size_t *arglens);
void lc_call_done(lc_call *c);

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
    const lc_script *s_acquire, *s_release, *s_renew, *s_force; /* built-in, shared */
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

/* Builds EVALSHA (use_source = 0) or EVAL (1) of call into argv/lens, which must have room
 * for 3 + call->nkeys + call->nargs entries; nk is scratch for the key count. Returns argc. */
int lc_script_argv(const lc_call *call, int use_source, const char **argv, size_t *lens,
                   char nk[16]);

/* 1 when r is Redis' NOSCRIPT error (the script must be sent again with EVAL). */
int lc_is_noscript(const redisReply *r);

/* lc_script_call of a prepared call. */
lc_status lc_call_run(lc_client *client, const lc_call *call, redisReply **reply, int *sent);

/* ---- locks (lock.c) ---- */

struct lc_lock {
    lc_client *client;
    pthread_mutex_t mu;       /* serialises this owner's calls */
    lc_hold h;                /* name, token, hold count, fence (hold.c) */
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
