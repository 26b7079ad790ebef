/*
 * lockcore — distributed locks on Redis, in C.
 *
 * A client (lc_client) is a connection pool to one Redis server plus two background helpers
 * shared by every lock made from it: a watchdog thread that renews held leases, and a pub/sub
 * listener that wakes waiters when a lock is released. A lock (lc_lock) is one owner of one lock
 * name: it carries a random 128-bit owner token, its own reentrant hold count and the fencing
 * token of its current hold. Every lock operation is a single Lua script, so acquire-with-lease,
 * owner-checked release and renewal are atomic on the server.
 *
 * Threads: an lc_client may be shared by any number of threads. An lc_lock is one owner; its
 * functions are serialised by an internal mutex, so sharing it between threads is safe but makes
 * those threads the same owner (reentrancy). Give each independent owner its own lc_lock.
 *
 * Errors: every call returns an lc_status. The message for the last non-OK status on the calling
 * thread is lc_errmsg(); the last message of a lock handle is also kept in lc_lock_errmsg().
 * The asynchronous face carries each message with its result instead (lockcore_async.h): a
 * loop's thread serves many requests. The library never logs.
 *
 * Redis keys used for a lock called NAME (keep a {hash tag} in NAME under Redis Cluster so all
 * three share one slot):
 *   NAME           hash {o: owner token, c: hold count, f: fencing token}, with the lease as TTL
 *   NAME:fence     integer, the last fencing token handed out (never expires)
 *   NAME:unlock    pub/sub channel, published on every full release
 */
#ifndef LOCKCORE_LOCKCORE_H
#define LOCKCORE_LOCKCORE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LC_VERSION "0.1.0"

typedef enum lc_status {
    LC_OK = 0,
    LC_EINVAL,   /* bad argument: NULL handle, empty or oversized name, lease <= 0 ... */
    LC_ENOMEM,   /* allocation failed */
    LC_EIO,      /* connection failed, dropped or timed out; the operation's effect is unknown */
    LC_EREDIS,   /* Redis answered with an error (auth, ACL, wrong type, script error) */
    LC_EBUSY,    /* try-lock: another owner holds the lock */
    LC_ETIMEOUT, /* lock-with-deadline: the deadline passed before the lock was free */
    LC_ENOTHELD, /* release/extend/eval by an owner that does not hold the lock */
    LC_ELOST,    /* the lock was held but has expired or was taken or deleted since */
    LC_ESTATE,   /* the call does not fit the handle's state (e.g. client being freed) */
    LC_EDOWN     /* async face, a command, script or fenced eval: the connection was down, the
                    command was never written, so it did not run (LC_EIO whenever it may
                    have been written) */
} lc_status;

/* Short constant name of a status ("LC_ETIMEOUT"); never NULL. */
const char *lc_status_name(lc_status st);

/* Message of the last non-OK status returned on this thread (thread-local, borrowed; valid until
 * the next lockcore call on this thread). "" when there is none. */
const char *lc_errmsg(void);

/* Longest lock name accepted, in bytes. */
#define LC_NAME_MAX 512

/* ---- client ---------------------------------------------------------------------------- */

typedef struct lc_client lc_client;

typedef struct lc_client_opts {
    int connect_timeout_ms; /* TCP/unix connect timeout (default 1000) */
    int command_timeout_ms; /* per-command socket timeout (default 1000) */
    int pool_max_idle;      /* idle connections kept for reuse (default 64) */
    int pipeline;           /* 1: every thread's commands share one connection, written in
                               batches by an I/O thread (auto-pipelining); 0: a pool of
                               connections, one per calling thread at a time (default 0) */
} lc_client_opts;

/* Fills opts with the defaults above. */
void lc_client_opts_init(lc_client_opts *opts);

/* Makes a client for the Redis at url and checks it with one PING (and AUTH/SELECT when the
 * URL asks). URL forms: redis://[[user]:password@]host[:port][/db] and unix:///path[?db=N]
 * (redis-cluster:// URLs are LC_EINVAL here: see lc_async_client_new). opts may be NULL for the
 * defaults. On LC_OK *out is a new client to free with lc_client_free; otherwise *out is NULL. A
 * client whose server is down at creation is an error (LC_EIO); later outages are survived: a
 * broken connection is dropped and the next call reconnects. */
lc_status lc_client_new(const char *url, const lc_client_opts *opts, lc_client **out);

/* Stops the watchdog and the listener, closes every connection and frees the client. Locks made
 * from it must have been freed first. NULL-safe. */
void lc_client_free(lc_client *client);

/* One PING round trip on a pooled connection: LC_OK when Redis answered PONG. */
lc_status lc_client_ping(lc_client *client);

/* Runs one command given as argv (binary-safe) on a pooled connection. On LC_OK *reply (if
 * reply is non-NULL) is a new reply the caller frees with freeReplyObject; an error reply from
 * Redis is LC_EREDIS with the reply still returned. */
lc_status lc_client_command(lc_client *client, int argc, const char **argv, const size_t *argvlen,
                            redisReply **reply);

/* Runs n commands on one pooled connection in one round trip (pipelined). cmds[i] is the argv
 * of command i (argcs[i] strings, lens[i] their lengths or NULL for NUL-terminated). On LC_OK
 * replies[0..n) are new replies (error replies included, check each); on failure every
 * replies[i] is NULL and the status is the I/O error. */
lc_status lc_client_pipeline(lc_client *client, int n, const int *argcs, const char **const *cmds,
                             const size_t *const *lens, redisReply **replies);

/* ---- scripts ---------------------------------------------------------------------------- */

/* A Lua script known by its SHA1; run with EVALSHA, loaded on NOSCRIPT. Immutable and shareable
 * between threads and clients once made. */
typedef struct lc_script lc_script;

/* Makes a script from Lua source (copied). *out to be freed with lc_script_free. */
lc_status lc_script_new(const char *source, lc_script **out);
void lc_script_free(lc_script *script);

/* The script's full Lua source and its SHA1 as 40 hex digits (borrowed), e.g. to pipeline
 * EVALSHA calls of your own. */
const char *lc_script_source(const lc_script *script);
const char *lc_script_sha(const lc_script *script);

/* Runs script on a pooled connection of client: EVALSHA with NOSCRIPT fallback. Keys and args
 * are binary-safe (lengths may be NULL for NUL-terminated strings). *reply as for
 * lc_client_command. */
lc_status lc_script_run(lc_client *client, const lc_script *script, int nkeys, const char **keys,
                        const size_t *keylens, int nargs, const char **args, const size_t *arglens,
                        redisReply **reply);

/* ---- lock ------------------------------------------------------------------------------- */

typedef struct lc_lock lc_lock;

/* Called from the watchdog thread when a held lock is found lost (expired, deleted or owned by
 * someone else at renewal). The lock is already marked lost when this runs. Keep it short: set a
 * flag or signal the owner. Inside it only lc_lock_lost, lc_lock_name and lc_lock_token may be
 * called on the lock; every other lc_lock_* call (held, fence, release, free...) may deadlock
 * with an owner thread releasing it at the same moment. */
typedef void (*lc_lost_fn)(lc_lock *lock, void *arg);

typedef struct lc_lock_opts {
    int lease_ms;       /* lease set on every acquire and renewal (default 30000, > 0) */
    int watchdog;       /* 1: renew the lease every lease/3 while held (default 1) */
    int max_hold_ms;    /* with watchdog: stop renewing after this much total hold (0 = no cap) */
    lc_lost_fn on_lost; /* optional, see lc_lost_fn */
    void *on_lost_arg;
} lc_lock_opts;

/* Fills opts with the defaults above. */
void lc_lock_opts_init(lc_lock_opts *opts);

/* Makes an owner of the lock called name (1..LC_NAME_MAX bytes, copied) with a fresh random
 * 128-bit owner token. opts may be NULL for the defaults. Makes no Redis call. *out to be freed
 * with lc_lock_free. */
lc_status lc_lock_new(lc_client *client, const char *name, const lc_lock_opts *opts, lc_lock **out);

/* Frees the handle. A lock still held is released first (all holds, best effort). NULL-safe. */
void lc_lock_free(lc_lock *lock);

/* Options of one acquire. */
typedef struct lc_acquire_opts {
    int wait_ms; /* 0: try once (try-lock); > 0: wait up to this long */
    int nread;   /* keys to GET in the same atomic step as a successful acquire */
    const char *const *read_keys;
    const size_t *read_keylens; /* NULL: read_keys are NUL-terminated */
} lc_acquire_opts;

/* Tries once to take the lock: LC_OK (taken, or hold count + 1 if this owner already holds it),
 * LC_EBUSY when another owner holds it. fence (may be NULL) gets the hold's fencing token.
 * LC_EIO (this and the other acquire calls): the reply was lost and the acquire counts as not
 * taken; if it had been sent, lockcore has already undone it, best effort, on another
 * connection (a hold it took is deleted, a re-entry's count set back), which can make the call
 * take up to twice command_timeout_ms. */
lc_status lc_lock_try(lc_lock *lock, uint64_t *fence);

/* Takes the lock, waiting up to wait_ms (woken by the unlock through pub/sub, with a jittered
 * back-off as fallback): LC_OK or LC_ETIMEOUT. wait_ms = 0 is lc_lock_try. */
lc_status lc_lock_acquire(lc_lock *lock, int wait_ms, uint64_t *fence);

/* The general form: lc_lock_acquire plus, on success, the values of opts->read_keys read in the
 * same script (one round trip). When values is non-NULL and the lock was taken, *values is a new
 * array reply with one element per read key (string or nil), freed with freeReplyObject;
 * otherwise *values is NULL. */
lc_status lc_lock_acquire_ex(lc_lock *lock, const lc_acquire_opts *opts, uint64_t *fence,
                             redisReply **values);

/* Drops one hold; the last one deletes the lock and publishes the unlock. Renewal of this lock
 * has stopped before it returns. LC_ENOTHELD when this handle holds nothing; LC_ELOST when it
 * held the lock but Redis no longer has it as owner (the local hold is cleared either way).
 * LC_EIO: the release may or may not have run; it counts as done (the hold count drops by one;
 * do not release that hold again). */
lc_status lc_lock_release(lc_lock *lock);

/* Sets the lease of the held lock to lease_ms from now (and for later renewals): LC_OK,
 * LC_ENOTHELD or LC_ELOST. */
lc_status lc_lock_extend(lc_lock *lock, int lease_ms);

/* State of the handle, as this process knows it (no Redis call). */
int lc_lock_held(lc_lock *lock);       /* hold count; 0 when not held */
int lc_lock_lost(lc_lock *lock);       /* 1 when the current hold was found lost */
uint64_t lc_lock_fence(lc_lock *lock); /* fencing token of the current hold; 0 when not held */
const char *lc_lock_name(const lc_lock *lock);
const char *lc_lock_token(const lc_lock *lock); /* 32 hex digits, borrowed */
const char *lc_lock_errmsg(lc_lock *lock);      /* last error on this handle, borrowed */

/* Deletes the lock whoever holds it and wakes its waiters (administrative recovery). LC_OK when
 * a lock was deleted, LC_ENOTHELD when there was none. */
lc_status lc_lock_force_unlock(lc_client *client, const char *name);

/* ---- fenced scripts: a data-store change guarded by the lock ---------------------------- */

/* Flags of lc_lock_eval. */
#define LC_EVAL_RELEASE 1 /* drop one hold in the same script, after the body ran */

/*
 * Runs body_script atomically together with a check that this handle still holds the lock with
 * the fencing token of its current hold. The script must have been made by lc_fenced_script_new;
 * its body sees only the caller's keys and args as KEYS[1..nkeys] and ARGV[1..nargs], plus the
 * Lua locals lc_fence (number) and lc_lock_key. When the check fails nothing of the body runs,
 * the result is LC_ELOST and the local hold is cleared (a later lc_lock_release answers
 * LC_ENOTHELD; a loss found by the watchdog instead leaves the hold for lc_lock_release to
 * report as LC_ELOST). With LC_EVAL_RELEASE the hold is dropped in the same script (renewal
 * stopped before the call is sent). On LC_OK *reply is the body's return value (new reply,
 * caller frees; NULL when the body returned nothing). Keys must hash to the lock's slot under
 * Redis Cluster. LC_EIO leaves the outcome unknown; with LC_EVAL_RELEASE the hold counts as
 * dropped, as for lc_lock_release.
 */
lc_status lc_lock_eval(lc_lock *lock, const lc_script *script, int flags, int nkeys,
                       const char **keys, const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **reply);

/* Makes a script for lc_lock_eval from a Lua body (wrapped in the fencing guard). The body may
 * return any Redis value. It must not raise an error after it wrote anything (Redis scripts do
 * not roll back). */
lc_status lc_fenced_script_new(const char *body, lc_script **out);

/*
 * For data stores outside the lock's Redis keys: a Lua function source that a script can paste in
 * to reject stale holders by fencing token alone:
 *     lc_fence_accept(seen_key, token) -> true when token > the highest token seen at seen_key
 *                                         (and records it), or equal to it from the same owner;
 *                                         false and the seen token for a stale holder.
 *     token: "T" or "T:owner" (T decimal; owner: the acquisition's id, so that a source that
 *     went back and hands T out again cannot pass as the holder that wrote with T); compared
 *     exactly as decimal strings, never as Lua numbers.
 * The C helper lc_fence_newer() is the same rule for stores written from C.
 */
extern const char LC_LUA_FENCE_ACCEPT[];
int lc_fence_newer(uint64_t token, uint64_t highest_seen);

/* Makes a data-store script fenced by a token alone (a Redlock's, run with
 * lc_async_redlock_eval): LC_LUA_FENCE_ACCEPT around the body. Called with KEYS = the seen key
 * (where the highest token so far is kept; under Redis Cluster in the slot of the body's keys),
 * then the body's keys, and ARGV = the token ("T" or "T:owner", as lc_fence_accept), then the
 * body's args; the body sees only its own KEYS/ARGV and the Lua local lc_fence (T). -> {0, seen}
 * (nothing ran: a later holder's token was seen there; seen as lc_token_reply_seen reads it) or
 * {1, body result}. Rules for the body as for lc_fenced_script_new. */
lc_status lc_token_fenced_script_new(const char *body, lc_script **out);

/* What a token-fenced script's reply r means: LC_OK with *body the body's result (borrowed from
 * r; NULL when it returned nothing), LC_ELOST ({0}: a later holder's token was seen, nothing
 * ran), LC_EREDIS (not such a reply: the script was not made by lc_token_fenced_script_new). */
lc_status lc_token_reply(const redisReply *r, const redisReply **body);

/* The seen token a refused token-fenced script answered ({0, seen}): what the lock's source must
 * hand out more than for its next holder to be accepted; 0 when r is not a refusal or carries
 * none (an older guard). */
uint64_t lc_token_reply_seen(const redisReply *r);

/* ---- multi-lock ------------------------------------------------------------------------- */

typedef struct lc_multilock lc_multilock;

/* One owner of several lock names (copied, duplicates removed), always acquired in sorted byte
 * order so two multi-locks over overlapping names cannot deadlock. */
lc_status lc_multilock_new(lc_client *client, int n, const char *const *names,
                           const lc_lock_opts *opts, lc_multilock **out);
void lc_multilock_free(lc_multilock *ml);

/* All or nothing: takes every lock within wait_ms in total (0: try each once), or releases what
 * it took and returns the first failure (LC_EBUSY, LC_ETIMEOUT, ...). */
lc_status lc_multilock_acquire(lc_multilock *ml, int wait_ms);

/* Releases every lock; LC_OK, or the first failure after trying all. */
lc_status lc_multilock_release(lc_multilock *ml);

/* The lock for names[i] in sorted order (borrowed), e.g. to read its fencing token. */
int lc_multilock_count(const lc_multilock *ml);
lc_lock *lc_multilock_get(lc_multilock *ml, int i);

/* ---- Redlock: one lock over N independent Redis masters ------------------------------- */

/*
 * A Redlock lock is held when a majority (N/2 + 1) of N independent masters (no replication
 * between them) run lockcore's acquire script for it within its lease. Every attempt sends the
 * script to all nodes at once, waits for each at most node_timeout_ms, and counts the nodes that
 * granted it; with a majority, the lock is valid for
 *     validity = lease - elapsed - (lease * drift_factor + 2 ms)
 * where elapsed is the attempt's duration on CLOCK_MONOTONIC. A failed attempt (no majority, or
 * validity <= 0) is undone on every node and retried after a jittered pause until the wait's
 * deadline. The keys on each node are those of an lc_lock of the same name (NAME, NAME:fence,
 * NAME:unlock), so an lc_lock and a Redlock of one name on one node exclude each other there.
 *
 * Fencing: each granted node increments its own NAME:fence; the lock's token is the maximum
 * over the granting majority, and it is written back (raised, never lowered) to granting nodes
 * that were behind until a majority carries it. Any later majority shares a node with that one,
 * so a later holder's token is strictly larger: check it at the data store with
 * LC_LUA_FENCE_ACCEPT. The counters must survive restarts (persistence): see docs/lockcore.md.
 *
 * Renewal (watchdog), extension and release go to every node; a renewal or extension that no
 * longer finds a majority reports the lock lost. A Redlock handle is not reentrant.
 *
 * This blocking face runs the asynchronous one (lockcore_async.h) on a loop thread of its own
 * per lc_redlock_client: the calls below hand their request to that thread and wait for its
 * answer. Handles are thread-safe; a handle's calls are serialised.
 */
typedef struct lc_redlock_client lc_redlock_client;
typedef struct lc_redlock lc_redlock;

typedef struct lc_redlock_opts {
    int lease_ms;        /* lease on every node (default 30000, > 0) */
    int watchdog;        /* 1: renew on every node every lease/3 while held (default 1) */
    int max_hold_ms;     /* with watchdog: no renewal past this much total hold (0 = no cap) */
    int node_timeout_ms; /* the longest one node's answer is waited for (default 100, > 0) */
    int retry_delay_ms;  /* pause between attempts: random in [base, 2 * base] (default 100) */
    double drift_factor; /* clock drift allowed per ms of lease (default 0.01) */
} lc_redlock_opts;

/* Fills opts with the defaults above. */
void lc_redlock_opts_init(lc_redlock_opts *opts);

/* Makes a client for the n (1..LC_REDLOCK_MAX_NODES) independent masters at urls (forms as
 * lc_client_new) and starts its loop thread. opts as for lc_async_client_new (NULL: defaults).
 * Nodes that are down are no error here: Redlock works as long as a majority answers. LC_OK with
 * *out to free with lc_redlock_client_free (after every lock made from it). */
#define LC_REDLOCK_MAX_NODES 64
lc_status lc_redlock_client_new(int n, const char *const *urls, const lc_client_opts *opts,
                                lc_redlock_client **out);
void lc_redlock_client_free(lc_redlock_client *rc);

/* Called on the client's loop thread when a renewal found the lock lost (no majority renewed it
 * before its validity ran out). Only lc_redlock_lost, _name and _token may be called from it. */
typedef void (*lc_redlock_lost_fn)(lc_redlock *lock, void *arg);

/* Makes an owner of the Redlock called name (1..LC_NAME_MAX bytes) with a fresh owner token.
 * opts may be NULL for the defaults; on_lost may be NULL. No Redis call. *out to be freed with
 * lc_redlock_free (which releases a hold still held). */
lc_status lc_redlock_new(lc_redlock_client *rc, const char *name, const lc_redlock_opts *opts,
                         lc_redlock_lost_fn on_lost, void *on_lost_arg, lc_redlock **out);
void lc_redlock_free(lc_redlock *lock);

/* Takes the lock on a majority, retrying until wait_ms has passed (0: one attempt).
 * LC_OK with *fence (may be NULL) the quorum's fencing token; LC_EBUSY (one attempt: another
 * owner holds it on too many nodes), LC_ETIMEOUT (wait_ms > 0 and no attempt succeeded), LC_EIO
 * (one attempt: too few nodes answered), LC_ESTATE (the handle already holds the lock). */
lc_status lc_redlock_acquire(lc_redlock *lock, int wait_ms, uint64_t *fence);
lc_status lc_redlock_try(lc_redlock *lock, uint64_t *fence);

/* Releases on every node. LC_OK when a majority had the hold and deleted it, LC_ELOST when a
 * majority no longer had it, LC_EIO when too few answered (the hold counts as released either
 * way), LC_ENOTHELD. */
lc_status lc_redlock_release(lc_redlock *lock);

/* Sets the lease on every node to lease_ms from now (and for later renewals). LC_OK when a
 * majority confirmed (the validity starts again), LC_ELOST when too few did (marked lost). */
lc_status lc_redlock_extend(lc_redlock *lock, int lease_ms);

int lc_redlock_held(lc_redlock *lock);            /* 1 when held, else 0 */
int lc_redlock_lost(lc_redlock *lock);            /* 1 when renewal or extension found it lost */
uint64_t lc_redlock_fence(lc_redlock *lock);      /* the quorum's token; 0 when not held */
int64_t lc_redlock_validity_ms(lc_redlock *lock); /* ms the hold is still valid; <= 0: not */
const char *lc_redlock_name(const lc_redlock *lock);
const char *lc_redlock_token(const lc_redlock *lock);

/* Several Redlock names, all or nothing, taken in sorted byte order (as lc_multilock). */
typedef struct lc_redlock_multi lc_redlock_multi;
lc_status lc_redlock_multi_new(lc_redlock_client *rc, int n, const char *const *names,
                               const lc_redlock_opts *opts, lc_redlock_multi **out);
void lc_redlock_multi_free(lc_redlock_multi *m);
/* Takes every name within wait_ms in total (0: one attempt each), or releases what it took and
 * returns the first failure. */
lc_status lc_redlock_multi_acquire(lc_redlock_multi *m, int wait_ms);
/* Releases every name: LC_OK or the first failure after trying all. */
lc_status lc_redlock_multi_release(lc_redlock_multi *m);
int lc_redlock_multi_count(const lc_redlock_multi *m);
lc_redlock *lc_redlock_multi_get(lc_redlock_multi *m, int i); /* sorted order, borrowed */

#ifdef __cplusplus
}
#endif

#endif /* LOCKCORE_LOCKCORE_H */
