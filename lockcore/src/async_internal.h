/*
 * Private declarations of the asynchronous face, shared by its files and by the Redlock files
 * above it. Not public API. The face is cut by noun:
 *
 *   async.c          the client: made and freed, the loop brackets (lc_async_enter/leave)
 *   async_conn.c     commands on connections: a command's record, its send, its deadline and
 *                    its reply; the connections themselves (connect, drop, reconnect)
 *   async_cluster.c  Redis Cluster routing I/O: a connection per node, MOVED/ASK/TRYAGAIN, the
 *                    slot map's refresh
 *   async_sub.c      the subscriber connection: unlock channels, their waiters, the probe
 *   async_op.c       operations in flight: life cycle and the acquire/eval/release machine
 *   async_lock.c     the lock handle: made and freed, its renewal, the calls that start an op
 *   async_command.c  plain commands and scripts (no lock), WAIT on a reply's connection
 *   async_libevent.c the libevent adapter of the hiredis contexts
 *
 * The lock logic itself (arguments, replies, hold count, undo) is hold.c's, shared with the
 * blocking face; these files are transport, timers and the waiting state machine.
 *
 * Objects and ownership:
 *   lc_async_client  made by the user; owns its connections (aconn), the channel table, the
 *                    list of operations in flight and the list of live locks (to orphan them
 *                    at free).
 *   lc_async_lock    made by the user; owns its hold (lc_hold), its renewal timer and at most
 *                    one operation at a time.
 *   aop              one per operation in flight (acquire, eval, release, command): all its
 *                    state, a named state, its timers. Made by the starting call, freed by
 *                    lc_aop_finish, which runs the user's callback exactly once.
 *   acmd             one per command sent: its argument copy (for the EVAL resend after
 *                    NOSCRIPT, and for undos), its deadline timer. Owned by hiredis once sent:
 *                    hiredis calls the reply callback (async_conn.c) exactly once (with NULL when
 *                    the connection goes), which frees it. An operation that ends first detaches
 *                    itself (cmd->op = NULL): the late reply is then harmless (an acquire it
 *                    carried is undone if it took the lock).
 *   achan            one per lock name with waiters: the subscription state and the waiters,
 *                    oldest first. An unlock message wakes the oldest sleeping waiter only.
 *
 * Every wait has a timer: each command its deadline (command_timeout_ms; on expiry the
 * connection is dropped, which fails every command on it with LC_EIO), each acquire its wait
 * deadline, each sleeping or subscribing waiter its fallback timer. lc_aop_finish cancels all
 * of an operation's timers and leaves its channel on every path.
 */
#ifndef LOCKCORE_ASYNC_INTERNAL_H
#define LOCKCORE_ASYNC_INTERNAL_H

#include <stdint.h>

#include <event2/util.h>
#include <hiredis/async.h>

#include "lockcore/lockcore_async.h"
#include "base_internal.h"
#include "cluster_internal.h"
#include "hold_internal.h"

struct event;
struct event_base;

/* Cluster mode: what the routing did so far (redirections followed, CLUSTER SLOTS sent and
 * those that changed the map) and how many slots the map knows now. All 0 for one Redis. */
typedef struct lc_cluster_stats {
    long moved, ask, tryagain, clusterdown, refreshes, refresh_changes;
    int known_slots;
} lc_cluster_stats;

/* ---- the objects ---- */

typedef struct aop aop;
typedef struct acmd acmd;
typedef struct achan achan;

typedef struct aconn {
    lc_async_client *client;
    redisAsyncContext *ac; /* NULL while down */
    int sub;               /* 1: the subscriber connection */
    int up;                /* connected (the connect callback said so) */
    int backoff_ms;
    struct event *reconnect; /* back-off timer while down */
    int64_t opened_ms;       /* the last connect attempt (lc_now_ms) */
    const char *why;         /* message for the commands failed by a drop we made */
    int node;                /* cluster: the node (lc_route index) it goes to; else -1 */
    uint64_t gen;            /* which connection: + 1 at every connect (lc_async_conn_ref) */
} aconn;

struct lc_async_client {
    struct event_base *base;
    lc_url url;
    lc_client_opts opts;
    aconn data, subc;
    aop *ops;             /* every operation in flight */
    lc_async_lock *locks; /* every live lock */
    achan *chans;
    acmd *deferred; /* fire-and-forget commands waiting for the data connection */
    int ndeferred;
    int depth; /* lc_async_enter nesting */
    int free_requested;
    int freeing;
    long wakeups;
    /* Cluster mode (redis-cluster://): the routing table, one data connection per node (made
     * on first use; `data` is unused), the slot-map refresh and the commands paused by a
     * TRYAGAIN. All NULL/0 for one Redis. */
    lc_route *route;
    aconn **nodes;
    int nnodes;
    int sub_next;          /* the node the subscriber connection tries next */
    int refresh_next;      /* the node the next CLUSTER SLOTS tries first */
    struct event *refresh; /* timer of the next CLUSTER SLOTS */
    int refresh_inflight;
    int refresh_wanted; /* another refresh asked for while one was in flight */
    int64_t refresh_sent_ms;
    acmd *parked;
    lc_cluster_stats stats;
    /* The connection of the reply whose callback runs now (lc_async_reply_conn), else NULL. */
    aconn *reply_conn;
    uint64_t reply_gen;
    /* The subscriber connection's liveness (lc_asub_on_probe_timer, async_sub.c): its timer,
     * and whether a probe is unanswered. */
    struct event *probe;
    int probe_out;
    long sub_drops; /* subscriber connections dropped for want of an answer (tests) */
};

struct lc_async_lock {
    lc_async_client *client; /* NULL once orphaned by lc_async_client_free */
    lc_hold h;
    lc_async_lost_fn on_lost;
    void *on_lost_arg;
    aop *op;                    /* the operation in flight, or NULL */
    struct event *renew;        /* renewal timer, made on the first hold with watchdog on */
    acmd *renew_cmd;            /* renewal in flight */
    int64_t renewed_ms;         /* last time Redis confirmed the lease */
    char errstr[LC_ERRSTR_MAX]; /* the last operation's failure ("" after a success) */
    lc_async_lock *prev, *next;
};

struct acmd {
    lc_async_client *client;
    aop *op;                 /* the operation waiting for this reply, or NULL */
    lc_async_lock *renew_of; /* a renewal of this lock, or NULL */
    acmd *undo;              /* detached acquire: sent if the acquire may have run */
    struct event *timer;     /* the command's deadline */
    const lc_script *script;
    int builtin; /* script is one of lockcore's (lives forever) */
    int resent;  /* already sent again with EVAL after NOSCRIPT */
    int argc;    /* including EVALSHA and the SHA */
    const char **argv;
    size_t *lens;
    acmd *next; /* in the deferred list, or the parked list (cluster) */
    /* cluster */
    int slot;      /* of the command's key; -1: none (any node) */
    aconn *conn;   /* the connection it was last sent on */
    int ask;       /* node + 1 to send to once, after ASKING (an ASK); 0: by slot */
    int redirects; /* redirections followed */
    int parked;    /* waiting out a TRYAGAIN pause (not in hiredis: ours) */
    int detached;  /* sent by lc_acmd_send_detached: nobody waits, but it must still arrive */
    aconn *pin;    /* lc_async_wait: only on this connection, while its gen is pin_gen */
    uint64_t pin_gen;
    int64_t deadline_ms; /* first sent + command timeout: TRYAGAIN retries end there */
};

typedef enum op_kind { OP_ACQUIRE, OP_EVAL, OP_RELEASE, OP_COMMAND } op_kind;

typedef enum op_state {
    OPS_ATTEMPT,     /* a command is in flight (or its failure is deferred to the loop) */
    OPS_SUBSCRIBING, /* acquire: busy, waiting for the unlock channel's subscription */
    OPS_SLEEPING,    /* acquire: waiting for an unlock, the fallback timer or the deadline */
    OPS_RELEASING    /* eval: the body failed, releasing on its own */
} op_state;

typedef enum op_event { EV_REPLY, EV_SUBSCRIBED, EV_UNLOCK, EV_TIMER, EV_DEADLINE } op_event;

struct aop {
    lc_async_client *client;
    lc_async_lock *lock;
    op_kind kind;
    op_state state;
    union {
        lc_async_acquire_fn acquire;
        lc_async_eval_fn eval;
        lc_async_done_fn done;
        lc_async_reply_fn reply;
    } cb;
    void *arg;
    acmd *cmd;                        /* in flight */
    struct event *timer;              /* deferred failure, subscription wait, fallback poll */
    lc_status deferred_st;            /* the failure the timer delivers in OPS_ATTEMPT */
    char deferred_msg[LC_ERRSTR_MAX]; /* ... and its message */
    /* acquire */
    int wait_ms;
    int64_t deadline_ms;
    struct event *deadline;
    int deadline_passed;
    int attempts; /* answered */
    int poll, poll_max;
    lc_status last_st;
    achan *ch;
    int woken;          /* woken by an unlock, attempt not answered yet */
    aop *qprev, *qnext; /* in ch's waiters */
    int nread;
    char **read_keys;
    size_t *read_lens;
    /* eval */
    int release;
    lc_status eval_st;
    aop *prev, *next; /* in the client's operations */
};

struct achan {
    char *name;
    int refs;       /* waiters */
    int inflight;   /* (UN)SUBSCRIBEs sent, not yet confirmed */
    int want;       /* the last one sent was a SUBSCRIBE */
    int subscribed; /* all confirmed and the last one was a SUBSCRIBE */
    int resync;     /* resubscribed after a reconnect: wake every sleeper once */
    long unclaimed; /* unlocks that found no sleeping waiter */
    aop *head, *tail;
    achan *next;
};

/* ---- async.c: the client (and the debug readers, each in the file of what it reads) ---- */

/* Attaches ac to base with lockcore's adapter (async_libevent.c). 0, or -1 (out of memory or
 * already attached). */
int lc_ev_attach(redisAsyncContext *ac, struct event_base *base, lc_async_client *client);

/* Bracket every entry from the loop into lockcore's code: a client freed in between is freed
 * by the outermost leave. */
void lc_async_enter(lc_async_client *client);
void lc_async_leave(lc_async_client *client);

/* For the tests: unlock messages that woke a waiter, waiters sleeping (subscribed, waiting for
 * an unlock) on the lock called name, and whether the data connection is up. */
long lc_async_debug_wakeups(const lc_async_client *client);
int lc_async_debug_sleepers(const lc_async_client *client, const char *name);
int lc_async_debug_connected(const lc_async_client *client);
/* The port the subscriber connection is up on (-1 while down), and how many times the
 * liveness probe dropped it. */
int lc_async_debug_sub_port(const lc_async_client *client);
long lc_async_debug_sub_drops(const lc_async_client *client);

/* Cluster mode: the routing counters so far (lc_cluster_stats, above). */
void lc_async_debug_cluster(const lc_async_client *client, lc_cluster_stats *out);
/* The port of the master the map names for slot, or -1 (unknown, or one Redis). */
int lc_async_debug_slot_port(const lc_async_client *client, int slot);

/* Arms the timer ev to fire in ms milliseconds (at once when ms <= 0). */
void lc_async_arm(struct event *ev, int64_t ms);

/* ---- async_conn.c: commands and connections ---- */

/* A command record for call (arguments copied). NULL when out of memory. */
acmd *lc_acmd_new(lc_async_client *client, const lc_call *call, int builtin);
/* Frees c, its timer and its undo (NULL-safe). */
void lc_acmd_free(acmd *c);
/* Writes the RESP text of the command argv[0..argc) (lens[i] bytes each, binary-safe):
 * "*<argc>\r\n", then "$<len>\r\n<bytes>\r\n" for each, the very bytes hiredis's
 * redisFormatCommandArgv writes, into buf[0..cap) (no NUL). Returns the text's length; when that
 * is more than cap nothing is written: call again with a buffer that large. */
size_t lc_acmd_format(int argc, const char *const *argv, const size_t *lens, char *buf, size_t cap);
/* Sends c (EVALSHA, EVAL once resent, or a plain command as given) on its connection with its
 * deadline. 0, or -1 when the connection is down or hiredis refused (c not sent). */
int lc_acmd_send(acmd *c);
/* Sends a command nobody waits for (an undo, a release at lock free); when the data connection
 * is down it waits for the next connect (bounded list). Takes c. */
void lc_acmd_send_detached(acmd *c);
/* Starts connecting conn (AUTH and SELECT queued first); on failure, retries after back-off. */
void lc_aconn_open(aconn *conn);
/* The connection ac of conn is gone or going (idempotent; ignores an older context). */
void lc_aconn_lost(aconn *conn, const redisAsyncContext *ac);
/* Drops conn's connection: every command on it gets its NULL reply, which reads why. */
void lc_aconn_fail(aconn *conn, const char *why);
/* The back-off timer of a connection (arg: the aconn). */
void lc_aconn_on_reconnect_timer(evutil_socket_t fd, short what, void *arg);

/* ---- async_cluster.c: Redis Cluster routing ---- */

/* The first CLUSTER SLOTS of a new client (no refresh pause before it). */
void lc_acluster_start(lc_async_client *client);
/* The connection for c (by ASK, slot, or any node up). NULL when out of memory. */
aconn *lc_acluster_conn(lc_async_client *client, acmd *c);
/* Asks for a CLUSTER SLOTS soon (at most one per REFRESH_MIN_MS). */
void lc_acluster_refresh_soon(lc_async_client *client);
/* The refresh timer (arg: the client). */
void lc_acluster_on_refresh_timer(evutil_socket_t fd, short what, void *arg);
/* Resends a command whose TRYAGAIN pause is over (or fails or drops it). */
void lc_acluster_unpark(acmd *c);
/* Follows an error reply r to c that is a redirection: 0 not one (report r), 1 followed (c is
 * not the caller's any more), -1 to resend but cannot now (report LC_EIO, not sent). */
int lc_acluster_redirect(acmd *c, const redisReply *r, aconn *conn);

/* ---- async_sub.c: the subscriber connection and the unlock channels ---- */

/* The subscriber connection went / is (re)opening. */
void lc_asub_lost(lc_async_client *client);
void lc_asub_connected(lc_async_client *client);
/* The liveness probe's timer (arg: the client). */
void lc_asub_on_probe_timer(evutil_socket_t fd, short what, void *arg);
/* Adds op to its lock's channel: 1 subscribed already, 0 on its way, -1 none possible now. */
int lc_achan_join(aop *op);
/* Removes op from its channel; pass: hand a wake-up on to the next waiter. */
void lc_achan_leave(aop *op, int pass);
/* Unlinks and frees c. */
void lc_achan_free(lc_async_client *client, achan *c);

/* ---- async_op.c: operations ---- */

/* A new operation of kind on l (NULL for a plain command), linked into the client's list.
 * NULL when out of memory. */
aop *lc_aop_new(lc_async_client *client, lc_async_lock *l, op_kind kind, void *arg);
/* The operation's command failed before it left: the failure reaches it from the loop. */
void lc_aop_defer(aop *op, lc_status st);
/* Sends c for op, or defers the failure. Takes c. */
void lc_aop_send(aop *op, acmd *c);
/* Ends op: timers, channel, command; its callback exactly once; op is freed. */
void lc_aop_finish(aop *op, lc_status st, const redisReply *reply);
/* Sends the next acquire attempt of op. */
void lc_aop_attempt(aop *op);
/* Dispatches an event to op's kind (the state machines). */
void lc_aop_on(aop *op, op_event ev, lc_status st, redisReply *r, int sent);
/* An acquire's wait deadline (arg: the aop). */
void lc_aop_on_deadline(evutil_socket_t fd, short what, void *arg);

/* ---- async_lock.c: the lock handle ---- */

/* Stops / starts l's renewal timer (a renewal in flight is forgotten). */
void lc_alock_renew_stop(lc_async_lock *l);
void lc_alock_renew_start(lc_async_lock *l);
/* A renewal's answer (r NULL when none came). Last thing it does: on_lost, which may free l. */
void lc_alock_renew_on_reply(lc_async_lock *l, lc_status st, const redisReply *r);
/* The release of holds of l / the undo of an acquire sent while l counted its current holds.
 * NULL when out of memory. */
acmd *lc_alock_release_cmd(lc_async_lock *l, int holds);
acmd *lc_alock_undo_cmd(lc_async_lock *l);

/* ---- async_command.c: plain commands ---- */

/* Starts an operation for the command c (taken). LC_OK, or LC_ENOMEM (c freed). */
lc_status lc_acommand_start(lc_async_client *client, acmd *c, lc_async_reply_fn cb, void *arg);

#endif
