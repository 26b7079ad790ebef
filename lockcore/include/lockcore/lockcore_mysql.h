/*
 * lockcore, MySQL/MariaDB backend (issue 24): named locks held by GET_LOCK on a MySQL or MariaDB
 * server, driven by a libevent loop (libmariadb's non-blocking API), with a fencing token per
 * name that the data store checks exactly as Redlock's (lc_token_fenced_script_new,
 * LC_LUA_FENCE_ACCEPT). Library lockcore_mysql (links libmariadb); docs/lockcore.md, "MySQL".
 *
 * A lock is a GET_LOCK session lock: it lives exactly as long as the connection that took it,
 * so every holder (and every waiter: GET_LOCK's wait occupies its connection) has a connection of
 * its own. An lc_mysql_client (one per loop) keeps the connections that hold nothing in an idle
 * pool (up to max_idle) and hands one to each acquire; the number of connections a loop opens is
 * therefore its holders + waiters at the busiest moment, and it keeps up to max_idle of them
 * afterwards. A release gives the connection back to the pool; a failed one is closed.
 *
 * Acquire is one round trip of three statements (a multi-statement):
 *   SET @lc_got = GET_LOCK(<lock name>, <wait in seconds>);
 *   INSERT INTO lc_fence(name, token) SELECT <name>, LAST_INSERT_ID(1) FROM DUAL WHERE @lc_got = 1
 *     ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1);
 *   SELECT @lc_got, IF(@lc_got = 1, LAST_INSERT_ID(), 0)
 * The counter row (table lc_fence in the URL's database, InnoDB, created when missing) is
 * incremented only by the session that holds the lock, committed at once (autocommit) and never
 * reset: tokens grow across holders and across server restarts. When GET_LOCK succeeds but the
 * counter does not (no table and no CREATE privilege, a full disk...), the connection is closed,
 * which frees the lock on the server, and the acquire fails (LC_EREDIS): no hold without a token.
 *
 * Lock names: GET_LOCK names are at most 64 characters; a name longer than that, or with a byte
 * outside printable ASCII, is locked as "<first 31 bytes, non-printables as '_'>~<32 hex digits
 * of a 128-bit hash of the whole name>". Two names that map to one GET_LOCK name (a hash
 * collision, or MariaDB's case-insensitive comparison of lock names) exclude each other, which is
 * safe; the counter row is keyed by the exact name (VARBINARY), so each name's tokens still grow.
 *
 * A lost lock: the server closes the connection (restarted, killed -9, `KILL <id>`, network
 * error) or the session no longer owns the name. While a lock is held, its idle connection is
 * watched for readability (the server sends nothing unasked, so anything is its end) and every
 * check_ms the holder asks `SELECT IS_USED_LOCK(name) = CONNECTION_ID()` with the command timeout
 * (a silent network is found by that deadline). Either marks the lock lost and calls on_lost. A
 * lost holder's fenced eval is not sent; one sent just before the loss is refused by the store as
 * soon as a later holder's token has been seen there (the fence is what makes it safe).
 *
 * No lease: a GET_LOCK is held as long as its session lives. A holder that stops running without
 * closing its connection (SIGSTOP, a long pause, a silent network) keeps the lock until the
 * server ends the session: set session_timeout_s (SET SESSION wait_timeout at each acquire) to
 * bound that; the holder's own checks keep a live session from ever being idle that long.
 *
 * Deadlines: connect, each statement's read and write: connect_timeout_ms / command_timeout_ms;
 * an acquire's GET_LOCK waits what is left of wait_ms once connected, and its answer is awaited
 * that long plus the command timeout. A step that outlives its deadline closes its connection
 * (the server then frees whatever it held) and fails with LC_EIO. Host names are resolved by
 * libmariadb with a blocking getaddrinfo at connect: give an IP address on a loop that serves
 * requests.
 *
 * Callback contract: as lockcore_async.h's (exactly once, on the loop thread, never from inside
 * the starting call; LC_ESTATE from inside the free call for an operation it cuts short). One
 * operation at a time per handle (another is LC_ESTATE). Reentrant per handle: acquiring a held
 * handle adds a hold (same token, no server call), release drops one; the last one releases.
 */
#ifndef LOCKCORE_LOCKCORE_MYSQL_H
#define LOCKCORE_LOCKCORE_MYSQL_H

#include "lockcore/lockcore_anylock.h"
#include "lockcore/lockcore_async.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lc_mysql_client lc_mysql_client;
typedef struct lc_mysql_lock lc_mysql_lock;

typedef struct lc_mysql_opts {
    int connect_timeout_ms; /* connect + handshake (default 1000) */
    int command_timeout_ms; /* each statement's read/write; added to an acquire's wait (1000) */
    int check_ms;           /* a held lock's ownership check period (default 1000; 0: none, the
                               socket watch only) */
    int max_idle;           /* connections kept for reuse (default 8) */
    int session_timeout_s;  /* > 0: each session's wait_timeout (the server ends a session silent
                               this long, freeing its locks): the lease of a holder that stopped
                               running (paused process, network gone). A live holder speaks every
                               check_ms, which must then be below it. 0 (default): the server's
                               wait_timeout (8 hours unless configured) */
} lc_mysql_opts;

void lc_mysql_opts_init(lc_mysql_opts *opts);

/* The parts of mysql://user[:password]@host[:port]/database (%XX decoded in user and password;
 * [v6 address] in brackets; port 3306 unless given; database 1..64 of [A-Za-z0-9_$]). */
typedef struct lc_mysql_url {
    char user[128];
    char password[256];
    char host[256];
    unsigned port;
    char database[65];
} lc_mysql_url;

/* Parses url into *out. LC_OK, or LC_EINVAL with the reason in err (errlen bytes; may be NULL). */
lc_status lc_mysql_url_parse(const char *url, lc_mysql_url *out, char *err, size_t errlen);

/* Makes a client on loop base for the server at url (lc_mysql_url_parse), opts NULL for the
 * defaults. Connects nothing yet (acquires do). LC_OK with *out to free with
 * lc_mysql_client_free, LC_EINVAL (bad url or opts; lc_errmsg says which), LC_ENOMEM. */
lc_status lc_mysql_client_new(struct event_base *base, const char *url, const lc_mysql_opts *opts,
                              lc_mysql_client **out);

/* Frees the client: every operation of its locks ends with LC_ESTATE (from inside this call),
 * every connection closes (the server frees the locks they held); live locks become orphans
 * whose calls return LC_ESTATE, still to free with lc_mysql_lock_free. Not from inside one of
 * the client's callbacks. NULL-safe. */
void lc_mysql_client_free(lc_mysql_client *client);

/* Result of an acquire or a release. Acquire: LC_OK (fence: the hold's token), LC_EBUSY
 * (wait_ms 0: held elsewhere), LC_ETIMEOUT (not free before the deadline), LC_ELOST (re-entry of
 * a handle whose hold was lost), LC_EIO (no answer: the connection is closed, so nothing stays
 * held), LC_EREDIS (the server refused: a statement failed), LC_ESTATE (freed). Release: LC_OK,
 * LC_ELOST (the session no longer had it), LC_EIO (no answer; the connection is closed, which
 * frees it), LC_ESTATE. */
typedef void (*lc_mysql_lock_fn)(lc_mysql_lock *lock, lc_status st, uint64_t fence, void *arg);
typedef void (*lc_mysql_lost_fn)(lc_mysql_lock *lock, void *arg);

/* Makes an owner of the lock called name (1..LC_NAME_MAX bytes, copied). on_lost (may be NULL)
 * is called on the loop when a held lock is found lost. No server call. */
lc_status lc_mysql_lock_new(lc_mysql_client *client, const char *name, lc_mysql_lost_fn on_lost,
                            void *on_lost_arg, lc_mysql_lock **out);

/* Frees the handle: an operation in flight ends with LC_ESTATE (callback from inside this
 * call); a hold, or an acquire in flight, is given up by closing its connection. NULL-safe. */
void lc_mysql_lock_free(lc_mysql_lock *lock);

/* Takes the lock within wait_ms (0: one try). Callback as above. */
lc_status lc_mysql_lock_acquire(lc_mysql_lock *lock, int wait_ms, lc_mysql_lock_fn cb, void *arg);

/* Drops one hold; the last one runs RELEASE_LOCK (cb may be NULL). */
lc_status lc_mysql_lock_release(lc_mysql_lock *lock, lc_mysql_lock_fn cb, void *arg);

/* Result of lc_mysql_lock_eval, as lc_async_redlock_eval's: LC_OK (reply: the body's result,
 * borrowed), LC_ELOST (the store has seen a later token: nothing ran; the lock is marked lost),
 * LC_EREDIS, LC_EIO, LC_EDOWN, LC_ESTATE. */
typedef void (*lc_mysql_eval_fn)(lc_mysql_lock *lock, lc_status st, const redisReply *reply,
                                 void *arg);

/* Runs script (lc_token_fenced_script_new; alive until the callback) on the data store with
 * this hold's token: KEYS = seen_key, keys...; ARGV = "token:owner", args... (copied). A refusal
 * raises the lc_fence row to the seen token (lc_mysql_client_raise). With
 * LC_EVAL_RELEASE one hold is dropped once the store has answered (in the background, no
 * callback for it). Returns LC_ENOTHELD or LC_ELOST (a lost hold: nothing sent; with
 * LC_EVAL_RELEASE the hold is dropped) without a callback. */
lc_status lc_mysql_lock_eval(lc_mysql_lock *lock, lc_async_client *store, const lc_script *script,
                             const char *seen_key, int flags, int nkeys, const char *const *keys,
                             const size_t *keylens, int nargs, const char *const *args,
                             const size_t *arglens, lc_mysql_eval_fn cb, void *arg);

int lc_mysql_lock_held(const lc_mysql_lock *lock);       /* hold count; 0 when not held */
int lc_mysql_lock_lost(const lc_mysql_lock *lock);       /* 1 once found lost, until released */
uint64_t lc_mysql_lock_fence(const lc_mysql_lock *lock); /* 0 when not held */
/* The acquisition's id sent beside the token (lc_async_token_script's owner; "" when not held):
 * the store takes an equal token only from the same acquisition. Borrowed, valid while held. */
const char *lc_mysql_lock_owner(const lc_mysql_lock *lock);

/* Raises the lc_fence counter row of the lock called name to at least seen (a row missing is
 * made at seen), so that its next acquire hands out a token above it: what to do when a fenced
 * commit was refused with the store's seen token (lc_token_reply_seen) above or equal to the
 * hold's, as after lc_fence was restored or the server failed over behind. lc_mysql_lock_eval
 * does it by itself; a caller that commits with lc_async_token_script calls it. Runs in the
 * background on a pooled connection (no callback; a failure is retried by the next refusal).
 * LC_OK started, LC_EINVAL (seen 0 or above INT64_MAX, bad name), LC_ESTATE, LC_ENOMEM. */
lc_status lc_mysql_client_raise(lc_mysql_client *client, const char *name, uint64_t seen);
const char *lc_mysql_lock_name(const lc_mysql_lock *lock);
/* The server's CONNECTION_ID() of the session holding the lock; 0 when not held. */
unsigned long lc_mysql_lock_conn_id(const lc_mysql_lock *lock);
/* The message of the handle's last failed operation ("" after a success), as
 * lc_async_lock_errmsg. */
const char *lc_mysql_lock_errmsg(const lc_mysql_lock *lock);
/* Connections the client has open now (holders, waiters, idle) (for tests and metrics). */
int lc_mysql_client_conns(const lc_mysql_client *client);

/* The MySQL backend of lockcore_anylock.h (b->client: an lc_mysql_client; no lease: opts are
 * not used). */
extern const lc_anylock_ops lc_anylock_mysql;

#ifdef __cplusplus
}
#endif

#endif /* LOCKCORE_LOCKCORE_MYSQL_H */
