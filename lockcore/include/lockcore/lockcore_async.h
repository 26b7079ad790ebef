/*
 * lockcore, asynchronous face: the same locks as lockcore.h, driven by a libevent loop.
 *
 * An lc_async_client belongs to one event loop (struct event_base) and is used only from the
 * thread that runs that loop. It has two hiredis async connections: a data connection, on which
 * every command of every lock of the client is pipelined (the commands issued during one loop
 * turn leave in one write), and a subscriber connection on which waiters of busy locks listen
 * for unlocks. No function here ever blocks; the results come to callbacks run by the loop.
 *
 * The lock logic is lockcore's one implementation (the scripts and hold bookkeeping of the
 * blocking lc_lock): same keys, same owner tokens, same fencing tokens, same exact hold count;
 * async and blocking owners of one name exclude each other.
 *
 * Callback contract (every lc_async_* call that takes a callback):
 *   - The call returns LC_OK when the operation started: its callback then runs exactly once,
 *     on the loop thread, from the loop (never from inside the starting call), with the result.
 *   - Any other return (LC_EINVAL, LC_ENOMEM, LC_ESTATE) means nothing started and the callback
 *     will never run.
 *   - A redisReply handed to a callback (read values, a script's result) is borrowed: it is
 *     freed when the callback returns (copy what you need). It may be NULL.
 *   - Inside a callback any lc_async_* function may be called, including starting the next
 *     operation on the same lock, lc_async_lock_free and lc_async_client_free (the client is
 *     then freed once the loop leaves lockcore's code).
 *   - lc_async_lock_free and lc_async_client_free call the callbacks of the operations they
 *     cut short, from inside the free call, with LC_ESTATE: exactly once, as always.
 *   - The message of a failure travels with its result, never through lc_errmsg() (one loop
 *     serves many requests, and the thread's message is the last failure of any of them): a
 *     reply callback gets it as errstr; a handle keeps the message of its last operation
 *     (lc_async_lock_errmsg, lc_async_redlock_errmsg, lc_async_redlock_multi_errmsg), "" after
 *     a success, until its next operation ends. Read it in the callback, copy what you keep.
 *     lc_errmsg() stays meaningful only right after a call that failed to start.
 *
 * Deadlines: hiredis 0.14 has no command timeout, so every command lockcore sends carries its
 * own timer of lc_client_opts.command_timeout_ms. A command that outlives it means Redis is not
 * answering: the connection is dropped, every command in flight on it fails with LC_EIO (the
 * outcome of each is unknown, as in the blocking API), and the client reconnects with a
 * back-off. Operations issued while the data connection is down fail with LC_EIO at once
 * (reported by the loop) or, when waiting for a lock, retry until their deadline.
 *
 * Handles are not thread-safe: use a client and its locks on their loop's thread only. One
 * operation at a time per lock handle (a second one is LC_ESTATE); give independent owners
 * their own handles.
 */
#ifndef LOCKCORE_LOCKCORE_ASYNC_H
#define LOCKCORE_LOCKCORE_ASYNC_H

#include "lockcore/lockcore.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

typedef struct lc_async_client lc_async_client;
typedef struct lc_async_lock lc_async_lock;

/* Makes a client on loop base for the Redis at url (forms as lc_client_new), or for a Redis
 * Cluster: redis-cluster://[[user]:password@]host[:port][,host[:port]...] names seed nodes; every
 * command then goes to the master of its key's slot (a script's first key, a plain command's
 * key) on a pipelined connection per node, MOVED/ASK/TRYAGAIN are followed inside lockcore and
 * the slot map is refreshed on change (docs/lockcore.md, "Redis Cluster"). opts may be NULL
 * for the defaults; command_timeout_ms is every command's deadline, connect_timeout_ms and the
 * pool and pipeline fields are not used. Starts connecting without waiting: a Redis that is
 * down is no error here; operations report it (LC_EIO). LC_OK with *out to free with
 * lc_async_client_free, else *out is NULL. */
lc_status lc_async_client_new(struct event_base *base, const char *url, const lc_client_opts *opts,
                              lc_async_client **out);

/* The loop the client was made on (lc_async_client_new's base): for timers of objects built on
 * the client (redlock_async.c), and for a caller that runs something on the loop's next turn. */
struct event_base *lc_async_client_base(const lc_async_client *client);

/* Frees the client: every operation still running on any of its locks ends with LC_ESTATE
 * (callback called from inside this call), renewals stop, both connections close. Holds still
 * held are not released (they lapse with their lease). Locks of the client that are still
 * alive become orphans: their calls return LC_ESTATE and they must still be freed with
 * lc_async_lock_free. Called from inside a lockcore callback, the free is finished when the
 * loop leaves lockcore's code. Must run on the loop's thread, before the event_base is freed.
 * NULL-safe. */
void lc_async_client_free(lc_async_client *client);

/* Called on the loop thread when renewal found a held lock lost (deleted, expired, taken by
 * another owner, or Redis unreachable until the last confirmed lease ran out). The lock is
 * already marked lost (lc_async_lock_lost); its hold count is kept so that the next release or
 * eval reports LC_ELOST. Any lc_async_* call may be made from it. */
typedef void (*lc_async_lost_fn)(lc_async_lock *lock, void *arg);

/* Makes an owner of the lock called name (as lc_lock_new: 1..LC_NAME_MAX bytes, copied; a new
 * random owner token). opts: lease_ms, watchdog (renewal every lease/3 on a loop timer while
 * held) and max_hold_ms as for lc_lock; opts->on_lost must be NULL (use on_lost here: the
 * callback of the async face gets an lc_async_lock). Makes no Redis call. *out to be freed with
 * lc_async_lock_free. */
lc_status lc_async_lock_new(lc_async_client *client, const char *name, const lc_lock_opts *opts,
                            lc_async_lost_fn on_lost, void *on_lost_arg, lc_async_lock **out);

/* Frees the handle. An operation in flight ends with LC_ESTATE (callback from inside this
 * call); an acquire of it that Redis runs anyway is undone when its reply comes. A hold still
 * held is released in the background (all holds, best effort, no callback). NULL-safe. */
void lc_async_lock_free(lc_async_lock *lock);

/* Result of an acquire: st is LC_OK (taken, or re-entered: hold count + 1), LC_EBUSY (try:
 * another owner holds it), LC_ETIMEOUT (the wait's deadline passed), LC_EIO (no answer; counts
 * as not taken: if the acquire had been sent it is undone in the background, as for
 * lc_lock_try), LC_EREDIS, or LC_ESTATE (freed). fence is the hold's fencing token (0 unless
 * LC_OK). values: with LC_OK, an array reply with one element per read key (string or nil),
 * borrowed; NULL otherwise. */
typedef void (*lc_async_acquire_fn)(lc_async_lock *lock, lc_status st, uint64_t fence,
                                    const redisReply *values, void *arg);

/*
 * Takes the lock, and on success reads read_keys (may be NULL when nread is 0; copied) in the
 * same atomic script. wait_ms = 0 tries once. wait_ms > 0 waits: after a first busy answer the
 * waiter subscribes to the lock's unlock channel (on the client's one subscriber connection),
 * retries once its subscription is confirmed (so an unlock in between cannot be missed), then
 * sleeps until an unlock wakes it or a jittered fallback timer fires. Each unlock message wakes
 * one waiter of that name in this client, the oldest; the others wait for the next unlock. At
 * the deadline a sleeping waiter ends with LC_ETIMEOUT; an attempt in flight at the deadline is
 * answered first (LC_OK if it took the lock), so the callback comes at most one command
 * timeout after the deadline. The timers and the subscription are gone when the callback runs.
 */
lc_status lc_async_lock_acquire(lc_async_lock *lock, int wait_ms, int nread,
                                const char *const *read_keys, const size_t *read_keylens,
                                lc_async_acquire_fn cb, void *arg);

/* lc_async_lock_acquire with wait_ms = 0: one attempt, LC_OK or LC_EBUSY. */
lc_status lc_async_lock_try(lc_async_lock *lock, int nread, const char *const *read_keys,
                            const size_t *read_keylens, lc_async_acquire_fn cb, void *arg);

/* Result of a fenced eval: as for lc_lock_eval (LC_OK, LC_ELOST, LC_ENOTHELD, LC_EREDIS,
 * LC_EIO), or LC_ESTATE (freed). reply: the body's return value (borrowed; NULL when it
 * returned nothing or on failure). */
typedef void (*lc_async_eval_fn)(lc_async_lock *lock, lc_status st, const redisReply *reply,
                                 void *arg);

/* Runs script (made by lc_fenced_script_new; it must stay alive until the callback) with the
 * fencing guard, exactly as lc_lock_eval: keys and args are copied; flags LC_EVAL_RELEASE drops
 * one hold in the same script (renewal stops before it is sent). A lock not held answers
 * LC_ENOTHELD through the callback. */
lc_status lc_async_eval(lc_async_lock *lock, const lc_script *script, int flags, int nkeys,
                        const char **keys, const size_t *keylens, int nargs, const char **args,
                        const size_t *arglens, lc_async_eval_fn cb, void *arg);

/* Result of a release: LC_OK, LC_ENOTHELD, LC_ELOST, LC_EIO (counts as done), LC_EREDIS, or
 * LC_ESTATE (freed). */
typedef void (*lc_async_done_fn)(lc_async_lock *lock, lc_status st, void *arg);

/* Drops one hold, as lc_lock_release; renewal of the last hold stops before the release is
 * sent. cb may be NULL (fire and forget: the hold count still follows the result). */
lc_status lc_async_release(lc_async_lock *lock, lc_async_done_fn cb, void *arg);

/* Result of a plain command or a script: st is LC_OK (reply: Redis's answer, borrowed, never
 * an error reply), LC_EREDIS (Redis answered with an error), LC_EIO (no answer within the
 * command timeout: the outcome is unknown), LC_EDOWN (never sent: the connection was down),
 * LC_ENOMEM, or LC_ESTATE (the client was freed). errstr: the failure's message ("" with
 * LC_OK), borrowed, valid during the callback. */
typedef void (*lc_async_reply_fn)(lc_status st, const redisReply *reply, const char *errstr,
                                  void *arg);

/* Sends one command (argv copied; lens may be NULL for NUL-terminated strings) on the client's
 * pipelined data connection, with the command timeout as its deadline. Callback contract as
 * above. */
lc_status lc_async_command(lc_async_client *client, int argc, const char *const *argv,
                           const size_t *lens, lc_async_reply_fn cb, void *arg);

/* As lc_async_command, but the command goes to the node that serves key[0..keylen) on a
 * Redis Cluster (on one Redis: the same connection as every command): for keyless commands
 * that must run where a key lives now. The key is not sent. Not for a WAIT that must cover a
 * write: the connection may have been replaced since the write, or the write redirected by
 * ASK (use lc_async_wait). */
/* Sends the command once to every master the client's slot map knows (on one Redis: once), each
 * on that master's current connection (for a WAIT that must cover given writes, use
 * lc_async_wait on the connections that carried them). cb is called once per send; *sent gets
 * the number of sends (each one's reply comes to cb). LC_OK, or an error with *sent the sends
 * already made (their callbacks still come); LC_ESTATE on a cluster whose map knows no master
 * yet (nothing was sent). */
lc_status lc_async_command_masters(lc_async_client *client, int argc, const char *const *argv,
                                   const size_t *lens, lc_async_reply_fn cb, void *arg, int *sent);

lc_status lc_async_command_key(lc_async_client *client, const char *key, size_t keylen, int argc,
                               const char *const *argv, const size_t *lens, lc_async_reply_fn cb,
                               void *arg);

/*
 * WAIT on the connection that carried a write (--replica acknowledgements that mean something).
 *
 * Redis's WAIT numreplicas timeout answers how many replicas have everything *this connection*
 * saw on its master: the offset Redis records after each command of the connection, a read as
 * well as a write. WAIT sent anywhere else vouches for nothing: on a fresh connection (after a
 * reconnect, or to the master a failover promoted) it answers at once with every replica,
 * though the write it should cover may be lost; on a Redis Cluster the master of the key's slot
 * is not where a command redirected by ASK ran. So a WAIT must go on the very connection that
 * carried the commands it vouches for, and when that connection is gone nothing can tell.
 *
 * lc_async_reply_conn, called inside any callback of a command, script, eval or acquire of
 * client that carries Redis's reply (st LC_OK or LC_EREDIS), names the connection that reply
 * came on: after a redirection, the node that ran it. lc_async_wait then sends WAIT on that
 * connection only.
 */
typedef struct lc_async_conn_ref {
    int node;               /* which node (-1 on one Redis); compare, do not interpret */
    unsigned long long gen; /* which of that node's connections (a reconnect makes a new one) */
} lc_async_conn_ref;

/* Inside a callback of client with Redis's reply: fills *out with the connection that carried
 * the command, 0. -1 (out untouched) outside such a callback, or when no reply came (LC_EIO:
 * the command may have run, on a connection now gone). */
int lc_async_reply_conn(const lc_async_client *client, lc_async_conn_ref *out);

/* Sends WAIT numreplicas timeout_ms on the connection ref names (lc_async_reply_conn), so the
 * answer counts the replicas that have every command that connection carried up to now. cb
 * gets Redis's integer reply, or LC_EDOWN without sending anything when that connection has
 * been closed or replaced since (its commands' fate on the replicas is unknown: the caller must
 * not take that as "replicated"), or LC_EIO when it fails while the WAIT is in flight. WAIT blocks
 * the connection in Redis for up to timeout_ms: keep it well below the command timeout, which is
 * this call's deadline too. LC_EINVAL when ref is not one of client's connections. Callback
 * contract as above. */
lc_status lc_async_wait(lc_async_client *client, const lc_async_conn_ref *ref, int numreplicas,
                        int timeout_ms, lc_async_reply_fn cb, void *arg);

/* Runs a token-fenced script (lc_token_fenced_script_new; alive until the callback) as
 * lc_async_script, with KEYS = seen_key, keys... and ARGV = token, args... (all copied; the lens
 * arrays may be NULL): the commit of a lock whose token the store checks (Redlock, MySQL, ...).
 * owner: the acquisition's id (NULL or "": none), sent as "token:owner" so that the store takes
 * an equal token only from the same acquisition (lc_fence_accept). Read the reply with
 * lc_token_reply (and lc_token_reply_seen). */
lc_status lc_async_token_script(lc_async_client *client, const lc_script *script,
                                const char *seen_key, uint64_t token, const char *owner, int nkeys,
                                const char *const *keys, const size_t *keylens, int nargs,
                                const char *const *args, const size_t *arglens,
                                lc_async_reply_fn cb, void *arg);

/* Runs script (lc_script_new; alive until the callback) by EVALSHA, resent once with EVAL when
 * Redis answers NOSCRIPT. keys and args copied; the lens arrays may be NULL. */
lc_status lc_async_script(lc_async_client *client, const lc_script *script, int nkeys,
                          const char *const *keys, const size_t *keylens, int nargs,
                          const char *const *args, const size_t *arglens, lc_async_reply_fn cb,
                          void *arg);

/* Runs script with the fencing guard of lock's current hold, like lc_async_eval without
 * LC_EVAL_RELEASE, but outside the handle's one-operation-at-a-time rule: any number may be in
 * flight, alongside each other and alongside the handle's own operation, and they run on the
 * server in the order they were sent. The owner and fencing tokens are copied at the call, and
 * the callback never sees the handle, so the handle may be handed on (to the next user of the
 * same hold) or freed before the reply comes. The callback gets the body's reply, or LC_ELOST
 * when the hold was gone on the server (nothing ran), LC_EIO, LC_EREDIS, LC_ESTATE (the client
 * was freed). Returns LC_ENOTHELD when the handle holds nothing (then no callback). The hold is
 * not marked lost by this call's result: the handle's next operation finds that out. */
lc_status lc_async_eval_detached(lc_async_lock *lock, const lc_script *script, int nkeys,
                                 const char **keys, const size_t *keylens, int nargs,
                                 const char **args, const size_t *arglens, lc_async_reply_fn cb,
                                 void *arg);

/* Marks the calling thread as an event-loop thread (on = 1) or not any more (on = 0): in debug
 * builds every blocking lockcore call made on a marked thread fails an assertion. */
void lc_async_mark_loop_thread(int on);

/* State of the handle as this process knows it (no Redis call). */
int lc_async_lock_held(const lc_async_lock *lock);       /* hold count; 0 when not held */
int lc_async_lock_lost(const lc_async_lock *lock);       /* 1 when renewal found it lost */
uint64_t lc_async_lock_fence(const lc_async_lock *lock); /* 0 when not held */
const char *lc_async_lock_name(const lc_async_lock *lock);
const char *lc_async_lock_token(const lc_async_lock *lock);
/* The message of the handle's last operation that failed ("" after a success), borrowed, valid
 * until its next operation ends: read it in the operation's callback. */
const char *lc_async_lock_errmsg(const lc_async_lock *lock);

/* ---- Redlock on an event loop (see lockcore.h for the algorithm) ---------------------- */

typedef struct lc_async_redlock lc_async_redlock;

/* Result of a Redlock operation: st as for the blocking lc_redlock_* call of the same name (or
 * LC_ESTATE: the handle was freed); fence is the quorum's token (0 unless an acquire's LC_OK). */
typedef void (*lc_async_redlock_fn)(lc_async_redlock *lock, lc_status st, uint64_t fence,
                                    void *arg);
/* Called on the loop when renewal found the lock lost; any lc_async_* call may be made from it. */
typedef void (*lc_async_redlock_lost_fn)(lc_async_redlock *lock, void *arg);

/* Makes an owner of the Redlock called name over the n nodes (1..LC_REDLOCK_MAX_NODES clients,
 * one per independent master, all on the same event loop; the array is copied, the clients are
 * borrowed). No Redis call. *out to free with lc_async_redlock_free. Free the handles before
 * their clients where you can; a node client freed while a request of the handle is in flight
 * on it (it answers LC_ESTATE) is never used by that handle again, and an acquire that can no
 * longer reach a majority of live clients ends with LC_ESTATE. */
lc_status lc_async_redlock_new(int n, lc_async_client *const *nodes, const char *name,
                               const lc_redlock_opts *opts, lc_async_redlock_lost_fn on_lost,
                               void *on_lost_arg, lc_async_redlock **out);

/* Frees the handle: an operation in flight ends with LC_ESTATE (callback from inside this
 * call), a hold (or an attempt in flight) is released on every node in the background. */
void lc_async_redlock_free(lc_async_redlock *lock);

/* One operation at a time per handle (another is LC_ESTATE); callback contract as above. */
lc_status lc_async_redlock_acquire(lc_async_redlock *lock, int wait_ms, lc_async_redlock_fn cb,
                                   void *arg);
lc_status lc_async_redlock_release(lc_async_redlock *lock, lc_async_redlock_fn cb, void *arg);
lc_status lc_async_redlock_extend(lc_async_redlock *lock, int lease_ms, lc_async_redlock_fn cb,
                                  void *arg);

/* Result of lc_async_redlock_eval: LC_OK (reply: the body's result, borrowed, may be NULL),
 * LC_ELOST (the store has seen a later holder's token: nothing ran, the lock is marked lost),
 * LC_EREDIS, LC_EIO (outcome unknown), LC_ENOTHELD, LC_ESTATE (freed). */
typedef void (*lc_async_redlock_eval_fn)(lc_async_redlock *lock, lc_status st,
                                         const redisReply *reply, void *arg);

/* Runs script (lc_token_fenced_script_new; alive until the callback) on the data store `store`
 * (an lc_async_client of the same loop, not one of the lock nodes) with this hold's fencing
 * token: the body runs only if the token is at least the highest one seen at seen_key. keys and
 * args copied. With LC_EVAL_RELEASE the Redlock is released on every node (in the background)
 * once the script has answered, whatever the answer. Returns LC_ELOST, sending nothing (no
 * callback), when the hold's validity (lc_async_redlock_validity_ms: lease - elapsed - drift)
 * has run out or renewal found it lost: the lock is then marked lost (with LC_EVAL_RELEASE
 * released in the background). */
lc_status lc_async_redlock_eval(lc_async_redlock *lock, lc_async_client *store,
                                const lc_script *script, const char *seen_key, int flags, int nkeys,
                                const char *const *keys, const size_t *keylens, int nargs,
                                const char *const *args, const size_t *arglens,
                                lc_async_redlock_eval_fn cb, void *arg);

/* Several Redlock names over the same nodes, all or nothing, taken one after the other in
 * sorted byte order (names copied, duplicates removed), as lc_redlock_multi. */
typedef struct lc_async_redlock_multi lc_async_redlock_multi;
typedef void (*lc_async_redlock_multi_fn)(lc_async_redlock_multi *m, lc_status st, void *arg);
lc_status lc_async_redlock_multi_new(int nnodes, lc_async_client *const *nodes, int n,
                                     const char *const *names, const lc_redlock_opts *opts,
                                     lc_async_redlock_multi **out);
/* Frees every handle (an operation in flight ends with LC_ESTATE; holds are released in the
 * background). NULL-safe. */
void lc_async_redlock_multi_free(lc_async_redlock_multi *m);
/* Takes every name within wait_ms in total (0: one attempt each): LC_OK, or the first failure
 * once what was taken has been released. One operation at a time (else LC_ESTATE). */
lc_status lc_async_redlock_multi_acquire(lc_async_redlock_multi *m, int wait_ms,
                                         lc_async_redlock_multi_fn cb, void *arg);
/* Releases every name held, in reverse order: LC_OK or the first failure after trying all. */
lc_status lc_async_redlock_multi_release(lc_async_redlock_multi *m, lc_async_redlock_multi_fn cb,
                                         void *arg);
int lc_async_redlock_multi_count(const lc_async_redlock_multi *m);
/* The message of the last operation's first failure ("" after a success), as
 * lc_async_lock_errmsg. */
const char *lc_async_redlock_multi_errmsg(const lc_async_redlock_multi *m);
lc_async_redlock *lc_async_redlock_multi_get(lc_async_redlock_multi *m, int i); /* borrowed */

int lc_async_redlock_held(const lc_async_redlock *lock);
int lc_async_redlock_lost(const lc_async_redlock *lock);
uint64_t lc_async_redlock_fence(const lc_async_redlock *lock);
/* The acquisition's id sent beside the token (lc_async_token_script's owner; "" when not held):
 * the store takes an equal token only from the same acquisition. Borrowed, valid while held. */
const char *lc_async_redlock_owner(const lc_async_redlock *lock);
/* Raises the fence counter of the Redlock called name on each of the n nodes to at least seen,
 * so that its next quorum's token is above it: what to do when a fenced commit was refused with
 * the store's seen token (lc_token_reply_seen) at or above the hold's, as after the nodes were
 * emptied or after a switch from another kind of lock. lc_async_redlock_eval does it by itself;
 * a caller that commits with lc_async_token_script calls it. In the background, no callback
 * (a node that misses it is raised by the next refusal). LC_OK sent to every node, else the
 * first failure (LC_EINVAL: seen 0 or above INT64_MAX, bad name). */
lc_status lc_async_redlock_raise(int n, lc_async_client *const *nodes, const char *name,
                                 uint64_t seen);
int64_t lc_async_redlock_validity_ms(const lc_async_redlock *lock);
const char *lc_async_redlock_name(const lc_async_redlock *lock);
const char *lc_async_redlock_token(const lc_async_redlock *lock);
/* The message of the handle's last failed operation, as lc_async_lock_errmsg. */
const char *lc_async_redlock_errmsg(const lc_async_redlock *lock);

#ifdef __cplusplus
}
#endif

#endif /* LOCKCORE_LOCKCORE_ASYNC_H */
