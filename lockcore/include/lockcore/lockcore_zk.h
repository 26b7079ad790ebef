/*
 * lockcore, ZooKeeper backend on an event loop (Debian's libzookeeper-mt): Curator's
 * InterProcessMutex recipe, driven by a libevent loop like the rest of the async face.
 *
 * A lock called NAME is the queue of ephemeral sequential nodes under /<prefix>/<NAME>/: each
 * acquire creates one (named <owner token>-<attempt>-lock-<sequence>), the lowest sequence holds
 * the lock, and every other waiter watches only the node just before its own (fair: the lock goes
 * in arrival order; no herd: a release wakes one waiter). A waiter or holder that dies takes its
 * node with its session, so the queue moves on after the session timeout. The fencing token of a
 * hold is a base plus its node's creation zxid (czxid): ZooKeeper's global transaction counter,
 * so it increases across holders of a name within one ensemble, not even reset when the parent
 * is recreated (a sequence number would be). The base is the data of /<prefix> (0 until
 * raised), read once the node is the lowest, and only ever raised (lc_zk_client_raise: a commit
 * refused because a rebuilt ensemble's zxids are below the store's seen token). A data store
 * checks the token with lc_token_fenced_script_new exactly as for Redlock (lc_zk_lock_eval).
 *
 * Sessions: one ZooKeeper session per lc_zk_client. A dropped connection makes the session
 * "suspect": no fenced eval is sent while it is (LC_EIO), and held locks stay held. If it comes
 * back within the session timeout (the one the server granted), nothing is lost. If the server
 * reports the session expired, or the connection stays down for a whole session timeout (the
 * server may have expired it by then and handed the lock on), every held lock of the client is
 * lost: marked lost, its node deleted in the background in case the session survived, and the
 * lock's lost callback called. A commit sent before that moment and delayed on its way is
 * refused by the store's token check once a later holder has written.
 *
 * Threads: the library runs an I/O thread and a completion thread per client; their results are
 * handed to the loop through a pipe, and every callback here runs on the loop thread, exactly
 * once, per the callback contract of lockcore_async.h. Use a client and its locks on their
 * loop's thread only. Every operation has a deadline (lc_zk_opts.op_timeout_ms, an acquire
 * wait_ms + op_timeout_ms).
 */
#ifndef LOCKCORE_LOCKCORE_ZK_H
#define LOCKCORE_LOCKCORE_ZK_H

#include "lockcore/lockcore_anylock.h"
#include "lockcore/lockcore_async.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lc_zk_client lc_zk_client;
typedef struct lc_zk_lock lc_zk_lock;

typedef struct lc_zk_opts {
    int session_timeout_ms; /* asked of the server, which bounds it (default 10000) */
    int op_timeout_ms;      /* deadline of one operation's requests (default 3000) */
    const char *prefix;     /* the locks' parent node, one path component (default "lockcore") */
} lc_zk_opts;

/* Fills opts with the defaults above. */
void lc_zk_opts_init(lc_zk_opts *opts);

/* Makes a client on loop base for the ensemble hosts ("HOST:PORT[,HOST:PORT...]") and starts
 * connecting (a server that is down is no error here; operations report it). opts may be NULL;
 * opts->prefix is copied. LC_OK with *out to free with lc_zk_client_free, else LC_EINVAL (bad
 * hosts or options) or LC_ENOMEM and *out is NULL. */
lc_status lc_zk_client_new(struct event_base *base, const char *hosts, const lc_zk_opts *opts,
                           lc_zk_client **out);

/* Closes the session (its nodes go with it) and frees the client: operations in flight end with
 * LC_ESTATE from inside this call; the client's locks become orphans (their calls answer
 * LC_ESTATE; free them still). Waits (up to min(op_timeout_ms, 2 s)) for the requests in flight,
 * such as the background deletes of the last releases, then joins the library's threads and waits
 * for the close request's answer: a shutdown path that blocks, not for a busy loop. Not from
 * inside a callback of this client. NULL-safe. */
void lc_zk_client_free(lc_zk_client *c);

/* 1 while the client's session is connected; 0 while connecting or suspect. */
int lc_zk_client_connected(const lc_zk_client *c);
/* How long the session is certainly alive by the client's own CLOCK_MONOTONIC: the send time
 * of the latest request ZooKeeper answered on it, plus the granted session timeout, less a
 * drift allowance (1 % + 2 ms, as Redlock's), minus now; 0 when that has passed, before anything
 * was answered, or while disconnected. The client sends a cheap request every third of the
 * session timeout so that a live, running client stays well inside it. lc_zk_lock_eval sends
 * nothing once it is 0: a holder paused past its session may otherwise run its commit before
 * the session event reaches the loop. */
int64_t lc_zk_client_validity_ms(const lc_zk_client *c);
/* The session timeout the server granted (0 before the first connection). */
int lc_zk_client_session_timeout_ms(const lc_zk_client *c);
/* How many watch notifications (a watched predecessor deleted or changed) reached the loop: a
 * release wakes only its successor, so this counts the waiters woken (tests, metrics). */
unsigned long lc_zk_client_watch_events(const lc_zk_client *c);

/* Called on the loop thread when the client's session was lost (expired, or unreachable for a
 * whole session timeout) while the lock was held. The hold count is kept so that the next
 * release reports LC_ELOST. Any lc_zk_* call but lc_zk_client_free may be made from it. */
typedef void (*lc_zk_lost_fn)(lc_zk_lock *lock, void *arg);

/* Makes an owner of the lock called name (1..LC_NAME_MAX bytes, copied; its node is
 * /<prefix>/<name> with '/', '%', control and non-ASCII bytes and a leading '.'
 * percent-encoded): no ZooKeeper call. *out to free with lc_zk_lock_free. */
lc_status lc_zk_lock_new(lc_zk_client *c, const char *name, lc_zk_lost_fn on_lost,
                         void *on_lost_arg, lc_zk_lock **out);

/* Frees the handle: an operation in flight ends with LC_ESTATE (callback from inside this
 * call); its node, held or waiting, is deleted in the background. NULL-safe. */
void lc_zk_lock_free(lc_zk_lock *lock);

/* Result of an acquire or a release. Acquire: LC_OK (taken, or re-entered: hold count + 1; fence
 * is the hold's token), LC_EBUSY (wait_ms 0 and another owner is ahead), LC_ETIMEOUT (the wait's
 * deadline passed: our node was deleted), LC_EIO (no answer, or the session was lost while
 * waiting: not taken, our node deleted in the background), LC_ESTATE (freed). Release: LC_OK,
 * LC_ELOST (the session was lost, or the node gone, before the release), LC_EIO (no answer:
 * counts as done, the node is deleted in the background), LC_ESTATE. */
typedef void (*lc_zk_fn)(lc_zk_lock *lock, lc_status st, uint64_t fence, void *arg);

/* Takes the lock, waiting up to wait_ms (0: one look at the queue, LC_EBUSY if someone is
 * ahead). One operation at a time per handle (else LC_ESTATE). A handle that holds the lock
 * re-enters it (no ZooKeeper call). */
lc_status lc_zk_lock_acquire(lc_zk_lock *lock, int wait_ms, lc_zk_fn cb, void *arg);

/* Drops one hold; the last one deletes the node (the successor's watch fires). cb may be NULL.
 * LC_ENOTHELD (no callback) when nothing is held. */
lc_status lc_zk_lock_release(lc_zk_lock *lock, lc_zk_fn cb, void *arg);

/* Result of lc_zk_lock_eval: as lc_async_redlock_eval_fn. */
typedef void (*lc_zk_eval_fn)(lc_zk_lock *lock, lc_status st, const redisReply *reply, void *arg);

/* Runs script (lc_token_fenced_script_new; alive until the callback) on the data store `store`
 * (an lc_async_client of the same loop) with this hold's token at seen_key, as
 * lc_async_redlock_eval: LC_OK (reply: the body's result), LC_ELOST (the store has seen a
 * later token: nothing ran, the lock is marked lost), LC_EREDIS, LC_EIO, LC_ESTATE. flags 0 or
 * LC_EVAL_RELEASE (one hold dropped once the store answered). Returns, sending nothing and with
 * no callback: LC_ENOTHELD when not held, LC_ELOST when the lock is known lost or the session's
 * local validity has run out (lc_zk_client_validity_ms 0: the lock is then marked lost), LC_EIO
 * while the session is suspect (disconnected: it may expire before the script runs). */
lc_status lc_zk_lock_eval(lc_zk_lock *lock, lc_async_client *store, const lc_script *script,
                          const char *seen_key, int flags, int nkeys, const char *const *keys,
                          const size_t *keylens, int nargs, const char *const *args,
                          const size_t *arglens, lc_zk_eval_fn cb, void *arg);

int lc_zk_lock_held(const lc_zk_lock *lock); /* hold count; 0 when not held */
int lc_zk_lock_lost(const lc_zk_lock *lock); /* 1 when the session was lost while held */
/* The hold's token: the base (the data of /<prefix>, read once the node was the lowest) plus the
 * node's czxid; 0 when not held. */
uint64_t lc_zk_lock_fence(const lc_zk_lock *lock);
/* The acquisition's id sent beside the token (lc_async_token_script's owner; "" when not held):
 * the store takes an equal token only from the same acquisition. Borrowed, valid while held. */
const char *lc_zk_lock_owner(const lc_zk_lock *lock);

/* Raises the token base (the data of /<prefix>) to at least seen, so that every later holder's
 * token (base + czxid, czxid >= 1) is above it: what to do when a fenced commit was refused
 * with the store's seen token (lc_token_reply_seen) at or above the hold's, as after the
 * ensemble was rebuilt (its zxids start again). lc_zk_lock_eval does it by itself; a caller
 * that commits with lc_async_token_script calls it. In the background (no callback; a few
 * attempts on version conflicts, then given up: the next refusal raises again). The base only
 * goes up. LC_OK started, LC_EINVAL (seen 0 or above INT64_MAX), LC_ESTATE, LC_ENOMEM. */
lc_status lc_zk_client_raise(lc_zk_client *client, uint64_t seen);
const char *lc_zk_lock_name(const lc_zk_lock *lock);
/* The full path of the handle's node while it waits or holds, else "" (borrowed). */
const char *lc_zk_lock_node(const lc_zk_lock *lock);
/* The message of the handle's last failed operation ("" after a success), as
 * lc_async_lock_errmsg. */
const char *lc_zk_lock_errmsg(const lc_zk_lock *lock);

/* The ZooKeeper backend of lockcore_anylock.h (b->client: an lc_zk_client; the session is the
 * lease: opts are not used). Its handles are closed before the client is freed. */
extern const lc_anylock_ops lc_anylock_zk;

#ifdef __cplusplus
}
#endif

#endif /* LOCKCORE_LOCKCORE_ZK_H */
