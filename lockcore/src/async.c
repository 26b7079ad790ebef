/*
 * The asynchronous face of lockcore (lockcore_async.h): locks driven by a libevent loop over
 * two hiredis async connections per client, a pipelined data connection and a subscriber
 * connection. The lock logic itself (arguments, replies, hold count, undo) is hold.c's, shared
 * with the blocking face; this file is transport, timers and the waiting state machine.
 *
 * Objects and ownership:
 *   lc_async_client  made by the user; owns both connections, the channel table, the list of
 *                    operations in flight and the list of live locks (to orphan them at free).
 *   lc_async_lock    made by the user; owns its hold (lc_hold), its renewal timer and at most
 *                    one operation at a time.
 *   aop              one per operation in flight (acquire, eval, release): all its state, a
 *                    named state, its timers. Made by the starting call, freed by op_finish,
 *                    which runs the user's callback exactly once.
 *   acmd             one per command sent: its argument copy (for the EVAL resend after
 *                    NOSCRIPT, and for undos), its deadline timer. Owned by hiredis once sent:
 *                    hiredis calls on_cmd_reply exactly once (with NULL when the connection
 *                    goes), which frees it. An operation that ends first detaches itself
 *                    (cmd->op = NULL): the late reply is then harmless (an acquire it carried is
 *                    undone if it took the lock).
 *   chan             one per lock name with waiters: the subscription state and the waiters,
 *                    oldest first. An unlock message wakes the oldest sleeping waiter only.
 *
 * Every wait has a timer: each command its deadline (command_timeout_ms; on expiry the
 * connection is dropped, which fails every command on it with LC_EIO), each acquire its wait
 * deadline, each sleeping or subscribing waiter its fallback timer. op_finish cancels all of an
 * operation's timers and leaves its channel on every path.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/event.h>

#include "async_internal.h"
#include "base_internal.h"
#include "client_internal.h"
#include "cluster_internal.h"
#include "hold_internal.h"
#include "script_internal.h"

enum { RECONNECT_MIN_MS = 10, RECONNECT_MAX_MS = 1000, DEFERRED_MAX = 1024 };

/* Cluster: at most one CLUSTER SLOTS per REFRESH_MIN_MS; a command follows at most
 * REDIRECTS_MAX redirections; TRYAGAIN pauses start at TRYAGAIN_MIN_MS and double. */
enum { REFRESH_MIN_MS = 100, REDIRECTS_MAX = 16, TRYAGAIN_MIN_MS = 10 };

typedef struct aop aop;
typedef struct acmd acmd;
typedef struct chan chan;

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
    chan *chans;
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
    int sub_next;            /* the node the subscriber connection tries next */
    int refresh_next;        /* the node the next CLUSTER SLOTS tries first */
    struct event *refresh;   /* timer of the next CLUSTER SLOTS */
    int refresh_inflight;
    int refresh_wanted;      /* another refresh asked for while one was in flight */
    int64_t refresh_sent_ms;
    acmd *parked;
    lc_cluster_stats stats;
    /* The connection of the reply whose callback runs now (lc_async_reply_conn), else NULL. */
    aconn *reply_conn;
    uint64_t reply_gen;
    /* The subscriber connection's liveness (sub_probe): its timer, and whether a probe is
     * unanswered. */
    struct event *probe;
    int probe_out;
    long sub_drops; /* subscriber connections dropped for want of an answer (tests) */
};

struct lc_async_lock {
    lc_async_client *client; /* NULL once orphaned by lc_async_client_free */
    lc_hold h;
    lc_async_lost_fn on_lost;
    void *on_lost_arg;
    aop *op;             /* the operation in flight, or NULL */
    struct event *renew; /* renewal timer, made on the first hold with watchdog on */
    acmd *renew_cmd;     /* renewal in flight */
    int64_t renewed_ms;  /* last time Redis confirmed the lease */
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
    int slot;            /* of the command's key; -1: none (any node) */
    aconn *conn;         /* the connection it was last sent on */
    int ask;             /* node + 1 to send to once, after ASKING (an ASK); 0: by slot */
    int redirects;       /* redirections followed */
    int parked;          /* waiting out a TRYAGAIN pause (not in hiredis: ours) */
    int detached;        /* sent by send_detached: nobody waits, but it must still arrive */
    aconn *pin;          /* lc_async_wait: only on this connection, while its gen is pin_gen */
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
    acmd *cmd;             /* in flight */
    struct event *timer;   /* deferred failure, subscription wait, fallback poll */
    lc_status deferred_st; /* the failure the timer delivers in OPS_ATTEMPT */
    char deferred_msg[LC_ERRSTR_MAX]; /* ... and its message */
    /* acquire */
    int wait_ms;
    int64_t deadline_ms;
    struct event *deadline;
    int deadline_passed;
    int attempts; /* answered */
    int poll, poll_max;
    lc_status last_st;
    chan *ch;
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

struct chan {
    char *name;
    int refs;       /* waiters */
    int inflight;   /* (UN)SUBSCRIBEs sent, not yet confirmed */
    int want;       /* the last one sent was a SUBSCRIBE */
    int subscribed; /* all confirmed and the last one was a SUBSCRIBE */
    int resync;     /* resubscribed after a reconnect: wake every sleeper once */
    long unclaimed; /* unlocks that found no sleeping waiter */
    aop *head, *tail;
    chan *next;
};

static void op_on(aop *op, op_event ev, lc_status st, redisReply *r, int sent);
static void attempt(aop *op);
static void conn_open(aconn *conn);
static void on_renew_timer(evutil_socket_t fd, short what, void *arg);

/* ---- entering and leaving from the loop ---- */

void lc_async_enter(lc_async_client *client)
{
    client->depth++;
    lc_in_loop++;
}

void lc_async_leave(lc_async_client *client)
{
    lc_in_loop--;
    if (--client->depth == 0 && client->free_requested) {
        client->free_requested = 0;
        lc_async_client_free(client);
    }
}

static struct timeval tv_ms(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

static void arm(struct event *ev, int64_t ms)
{
    struct timeval tv = tv_ms(ms);
    evtimer_add(ev, &tv);
}

/* ---- commands ---- */

/* A command record for call (arguments copied). NULL when out of memory. */
static acmd *cmd_new(lc_async_client *client, const lc_call *call, int builtin)
{
    int argc = 3 + call->nkeys + call->nargs;
    const char **argv = malloc(sizeof(*argv) * (size_t)argc);
    size_t *lens = malloc(sizeof(*lens) * (size_t)argc);
    char nk[16];
    acmd *c = NULL;
    if (!argv || !lens)
        goto out;
    lc_script_argv(call, 0, argv, lens, nk);
    size_t bytes = 0;
    for (int i = 2; i < argc; i++)
        bytes += lens[i] + 1;
    c = calloc(1,
               sizeof(*c) + sizeof(char *) * (size_t)argc + sizeof(size_t) * (size_t)argc + bytes);
    if (!c)
        goto out;
    c->client = client;
    c->script = call->script;
    c->builtin = builtin;
    c->slot = client->route && call->nkeys > 0 ? lc_key_slot(call->keys[0], call->keylens[0]) : -1;
    c->argc = argc;
    c->argv = (const char **)(c + 1);
    c->lens = (size_t *)(c->argv + argc);
    char *p = (char *)(c->lens + argc);
    for (int i = 2; i < argc; i++) {
        memcpy(p, argv[i], lens[i]);
        p[lens[i]] = '\0';
        c->argv[i] = p;
        c->lens[i] = lens[i];
        p += lens[i] + 1;
    }
out:
    free(argv);
    free(lens);
    return c;
}

static void cmd_free(acmd *c)
{
    if (!c)
        return;
    if (c->timer)
        event_free(c->timer);
    cmd_free(c->undo);
    free(c);
}

static void on_cmd_reply(redisAsyncContext *ac, void *reply, void *privdata);

static void conn_fail(aconn *conn, const char *why);
static void conn_lost(aconn *conn, const redisAsyncContext *ac);
static void cluster_unpark(acmd *c);
static aconn *cluster_conn(lc_async_client *client, acmd *c);
static int cluster_redirect(acmd *c, const redisReply *r, aconn *conn);

static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    acmd *c = arg;
    lc_async_client *client = c->client;
    lc_async_enter(client);
    if (c->parked) {
        cluster_unpark(c); /* its TRYAGAIN pause is over */
    } else if (client->route) {
        /* That node stopped answering. Its connection goes (and the subscriber connection if
         * it is on the same node); the other nodes' are not concerned. */
        aconn *conn = c->conn;
        if (client->subc.ac && client->subc.node == conn->node)
            conn_fail(&client->subc, "redis: no reply within the command timeout");
        conn_fail(conn, "redis: no reply within the command timeout");
    } else {
        /* Redis stopped answering: it is down. Both connections go; every command in flight
         * fails with LC_EIO (this one included) and the client reconnects with a back-off. */
        conn_fail(&client->data, "redis: no reply within the command timeout");
        conn_fail(&client->subc, "redis: no reply within the command timeout");
    }
    lc_async_leave(client);
}

/* Sends c on the data connection (EVALSHA, or EVAL once resent) with its deadline. 0, or -1
 * when the connection is down or hiredis refused (c not sent). */
static int cmd_send(acmd *c)
{
    lc_async_client *client = c->client;
    if (client->freeing)
        return -1;
    if (c->pin) {
        /* A WAIT for commands that went on that connection: on no other (a fresh connection's
         * WAIT covers nothing), and not on a new connection to the same node. */
        if (!c->pin->ac || c->pin->gen != c->pin_gen)
            return -1;
        c->conn = c->pin;
        if (redisAsyncCommandArgv(c->pin->ac, on_cmd_reply, c, c->argc, c->argv, c->lens) !=
            REDIS_OK)
            return -1;
        if (!c->timer)
            c->timer = evtimer_new(client->base, on_cmd_timeout, c);
        if (c->timer)
            arm(c->timer, client->opts.command_timeout_ms);
        return 0;
    }
    aconn *data = client->route ? cluster_conn(client, c) : &client->data;
    if (!data)
        return -1;
    if (!data->ac && data->reconnect && lc_now_ms() - data->opened_ms >= RECONNECT_MIN_MS) {
        /* Down and waiting out its back-off: a command to send is worth an attempt now (at
         * most one per RECONNECT_MIN_MS). hiredis queues commands on a context still
         * connecting; if the connect fails they fail with LC_EIO as any command on a lost
         * connection would. */
        event_del(data->reconnect);
        conn_open(data);
    }
    redisAsyncContext *ac = data->ac;
    if (!ac)
        return -1;
    c->conn = data;
    if (client->route) {
        if (!c->deadline_ms)
            c->deadline_ms = lc_now_ms() + client->opts.command_timeout_ms;
        if (c->ask) {
            /* An ASK: this one command may use the importing node's slot, once. */
            const char *asking[1] = {"ASKING"};
            if (redisAsyncCommandArgv(ac, NULL, NULL, 1, asking, NULL) != REDIS_OK)
                return -1;
            c->ask = 0;
        }
    }
    if (!c->script) {
        /* A plain command (lc_async_command): sent as given. */
        if (redisAsyncCommandArgv(ac, on_cmd_reply, c, c->argc, c->argv, c->lens) != REDIS_OK)
            return -1;
        if (!c->timer)
            c->timer = evtimer_new(client->base, on_cmd_timeout, c);
        if (c->timer)
            arm(c->timer, client->opts.command_timeout_ms);
        return 0;
    }
    const char *src = lc_script_source(c->script);
    c->argv[0] = c->resent ? "EVAL" : "EVALSHA";
    c->lens[0] = strlen(c->argv[0]);
    c->argv[1] = c->resent ? src : lc_script_sha(c->script);
    c->lens[1] = c->resent ? strlen(src) : 40;
    if (redisAsyncCommandArgv(ac, on_cmd_reply, c, c->argc, c->argv, c->lens) != REDIS_OK)
        return -1;
    if (!c->timer)
        c->timer = evtimer_new(client->base, on_cmd_timeout, c);
    if (c->timer)
        arm(c->timer, client->opts.command_timeout_ms);
    return 0;
}

/* Sends a command nobody waits for (an undo, a release at lock free). When the data connection
 * is down it waits for the next connect (bounded list). Takes c. */
static void send_detached(acmd *c)
{
    lc_async_client *client = c->client;
    if (client->freeing || !c) {
        cmd_free(c);
        return;
    }
    c->detached = 1;
    if (cmd_send(c) == 0)
        return;
    if (client->ndeferred >= DEFERRED_MAX) {
        cmd_free(c);
        return;
    }
    c->next = client->deferred;
    client->deferred = c;
    client->ndeferred++;
}

/* The undo of an acquire of l sent while l counted its current holds: the release script for
 * one hold more (hold.c). NULL when out of memory. */
static acmd *undo_cmd(lc_async_lock *l)
{
    lc_call call;
    acmd *c = NULL;
    if (lc_call_release(&call, &l->h, l->h.count + 1) == LC_OK)
        c = cmd_new(l->client, &call, 1);
    lc_call_done(&call);
    return c;
}

static void renew_on_reply(lc_async_lock *l, lc_status st, const redisReply *r);

/* Whether an acquire reply says the lock was taken. */
static int acquire_taken(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static void on_cmd_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    acmd *c = privdata;
    lc_async_client *client = c->client;
    redisReply *r = reply;
    lc_status st;
    int sent = 1;
    if (c->timer)
        event_del(c->timer);
    aconn *conn = ac->data;
    if (!r) {
        const char *why = conn->ac == ac || !conn->why ? NULL : conn->why;
        /* hiredis writes nothing before the connect completes: a command queued on a context
         * that never connected (a send while reconnecting) did not leave. */
        sent = (ac->c.flags & REDIS_CONNECTED) != 0;
        st = lc_fail(LC_EIO, "%s",
                     why                           ? why
                     : ac->errstr && ac->errstr[0] ? ac->errstr
                                                   : "redis: connection lost");
        conn_lost(conn, ac); /* hiredis is tearing it down already */
    } else {
        conn->backoff_ms = 0; /* Redis answers: a later drop reconnects at once */
        int redirected =
            client->route && r->type == REDIS_REPLY_ERROR ? cluster_redirect(c, r, conn) : 0;
        if (redirected > 0)
            return; /* on its way again, paused, or dropped: c is not ours here any more */
        if (redirected < 0) {
            /* Redirected (so not run), but the new node cannot be reached now. */
            sent = 0;
            r = NULL;
            st = lc_fail(LC_EIO, "redis cluster: the node a redirection named is not connected");
        } else if (c->script && lc_is_noscript(r) && !c->resent && (c->op || c->builtin)) {
            /* Not run: the server lost its script cache. Again with the source. */
            c->resent = 1;
            if (cmd_send(c) == 0)
                return;
            sent = 0;
            r = NULL;
            st = lc_fail(LC_EIO, "redis: connection lost");
        } else if (r->type == REDIS_REPLY_ERROR) {
            st = lc_fail(LC_EREDIS, "redis: %s", r->str);
        } else {
            st = LC_OK;
        }
    }
    /* The connection this reply came on, for lc_async_reply_conn in the callbacks below (a
     * redirected command's last node: after an ASK, the importing node). */
    aconn *outer = client->reply_conn;
    uint64_t outer_gen = client->reply_gen;
    client->reply_conn = r && sent && conn->ac == ac ? conn : NULL;
    client->reply_gen = conn->gen;
    if (c->renew_of) {
        lc_async_lock *l = c->renew_of;
        c->renew_of = NULL;
        l->renew_cmd = NULL;
        renew_on_reply(l, st, r);
    } else if (c->op) {
        aop *op = c->op;
        c->op = NULL;
        op->cmd = NULL;
        op_on(op, EV_REPLY, st, r, sent);
    } else if (c->undo && ((st == LC_OK && acquire_taken(r)) || (st == LC_EIO && sent))) {
        acmd *undo = c->undo;
        c->undo = NULL;
        send_detached(undo);
    }
    client->reply_conn = outer;
    client->reply_gen = outer_gen;
    cmd_free(c);
}

/* ---- connections ---- */

static void sub_lost(lc_async_client *client);
static void sub_connected(lc_async_client *client);
static void cluster_refresh_soon(lc_async_client *client);

static void schedule_reconnect(aconn *conn)
{
    lc_async_client *client = conn->client;
    if (client->freeing || !conn->reconnect)
        return;
    int b = conn->backoff_ms;
    b = b == 0 ? RECONNECT_MIN_MS : (b * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : b * 2);
    conn->backoff_ms = b;
    arm(conn->reconnect, lc_jitter_ms(b / 2 > 0 ? b / 2 : 1));
}

/* The connection ac of conn is gone or going (idempotent; ignores an older context). */
static void conn_lost(aconn *conn, const redisAsyncContext *ac)
{
    if (!ac || conn->ac != ac)
        return;
    conn->ac = NULL;
    conn->up = 0;
    if (conn->sub)
        sub_lost(conn->client);
    else if (conn->client->route && !conn->client->freeing)
        cluster_refresh_soon(conn->client); /* a node went: its slots may have a new master */
    schedule_reconnect(conn);
}

/* Drops conn's connection ourselves: every command on it gets its callback (NULL reply), which
 * reads why as its message. */
static void conn_fail(aconn *conn, const char *why)
{
    redisAsyncContext *ac = conn->ac;
    if (!ac)
        return;
    if (why)
        conn->why = why;
    conn_lost(conn, ac);
    redisAsyncFree(ac);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    aconn *conn = ac->data;
    if (status != REDIS_OK)
        conn_lost(conn, ac);
    else if (conn->ac == ac)
        conn->up = 1;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    conn_lost(ac->data, ac);
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aconn *conn = arg;
    lc_async_client *client = conn->client;
    lc_async_enter(client);
    if (!conn->ac)
        conn_open(conn);
    lc_async_leave(client);
}

/* Starts connecting conn (AUTH and SELECT queued first). On failure, retries after back-off. */
static void conn_open(aconn *conn)
{
    lc_async_client *client = conn->client;
    const lc_url *u = &client->url;
    conn->opened_ms = lc_now_ms();
    if (client->route && conn->sub) /* any node hears every PUBLISH of the cluster */
        conn->node = client->sub_next++ % lc_route_nodes(client->route);
    redisAsyncContext *ac =
        u->unix_socket ? redisAsyncConnectUnix(u->path)
        : client->route
            ? redisAsyncConnect(lc_route_host(client->route, conn->node),
                                lc_route_port(client->route, conn->node))
            : redisAsyncConnect(u->host, u->port);
    if (!ac || ac->err || lc_ev_attach(ac, client->base, client) != 0) {
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(conn);
        return;
    }
    ac->data = conn;
    conn->gen++;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    conn->ac = ac;
    conn->why = NULL;
    if (u->password[0]) {
        const char *av[3] = {"AUTH", u->user[0] ? u->user : u->password, u->password};
        redisAsyncCommandArgv(ac, NULL, NULL, u->user[0] ? 3 : 2, av, NULL);
    }
    if (u->db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u->db);
        const char *av[2] = {"SELECT", db};
        redisAsyncCommandArgv(ac, NULL, NULL, 2, av, NULL);
    }
    if (conn->sub) {
        sub_connected(client);
    } else {
        acmd *list = client->deferred;
        client->deferred = NULL;
        client->ndeferred = 0;
        while (list) {
            acmd *c = list;
            list = c->next;
            c->next = NULL;
            send_detached(c);
        }
    }
}

/* ---- Redis Cluster: a connection per node, redirections, the slot map ----
 *
 * In cluster mode (a redis-cluster:// URL) every command goes on the data connection of the
 * node that serves its key's slot (cluster_conn; the key is a script's first key, or the key
 * of a plain command, see lc_command_key), so the commands of one loop turn leave in one write
 * per node. Keyless commands go to any connected node. The map (cluster_route.c) comes from
 * CLUSTER SLOTS, asked at start, after a MOVED, a CLUSTERDOWN, and whenever a node's connection
 * goes (a dead master's replica takes over its slots), at most once per REFRESH_MIN_MS.
 * Redirections (cluster_redirect) are followed inside lockcore, invisibly to the operation:
 * MOVED updates the slot and resends; ASK resends once to the named node after ASKING;
 * TRYAGAIN pauses the command (parked, with a doubling pause) and resends it while its first
 * send's command timeout allows, after which the TRYAGAIN error is reported. A redirected
 * command did not run, so resending it can never apply it twice. CLUSTERDOWN is reported as
 * the error it is (LC_EREDIS).
 */

/* The data connection of node (made on first use, not yet connected). NULL when out of memory. */
static aconn *node_conn(lc_async_client *client, int node)
{
    if (node < 0 || node >= lc_route_nodes(client->route))
        return NULL;
    if (node >= client->nnodes) {
        int n = lc_route_nodes(client->route);
        aconn **nodes = realloc(client->nodes, sizeof(*nodes) * (size_t)n);
        if (!nodes)
            return NULL;
        for (int i = client->nnodes; i < n; i++)
            nodes[i] = NULL;
        client->nodes = nodes;
        client->nnodes = n;
    }
    aconn *conn = client->nodes[node];
    if (!conn) {
        conn = calloc(1, sizeof(*conn));
        if (!conn)
            return NULL;
        conn->client = client;
        conn->node = node;
        conn->reconnect = evtimer_new(client->base, on_reconnect_timer, conn);
        if (!conn->reconnect) {
            free(conn);
            return NULL;
        }
        client->nodes[node] = conn;
    }
    return conn;
}

/* The connection for c: an ASK's node, else the master of c's slot, else (no key, or a slot
 * the map does not know yet: a MOVED will tell) a node whose connection is up, else a seed. */
static aconn *cluster_conn(lc_async_client *client, acmd *c)
{
    int node = c->ask ? c->ask - 1 : lc_route_slot(client->route, c->slot);
    if (node < 0) {
        for (int i = 0; i < client->nnodes && node < 0; i++)
            if (client->nodes[i] && client->nodes[i]->up)
                node = i;
        if (node < 0)
            node = 0;
    }
    return node_conn(client, node);
}

static void on_slots_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends CLUSTER SLOTS to a node whose connection is up (taking turns), else to the next one
 * in turn (connecting it). When none can be asked now, tries again later. */
static void cluster_refresh_send(lc_async_client *client)
{
    int n = lc_route_nodes(client->route);
    aconn *conn = NULL;
    for (int k = 0; k < n && !conn; k++) {
        int i = (client->refresh_next + k) % n;
        if (i < client->nnodes && client->nodes[i] && client->nodes[i]->up)
            conn = client->nodes[i];
    }
    if (!conn) {
        conn = node_conn(client, client->refresh_next % n);
        client->refresh_next = (client->refresh_next + 1) % n;
        if (conn && !conn->ac)
            conn_open(conn);
    } else {
        client->refresh_next = (conn->node + 1) % n;
    }
    const char *av[2] = {"CLUSTER", "SLOTS"};
    if (!conn || !conn->ac ||
        redisAsyncCommandArgv(conn->ac, on_slots_reply, client, 2, av, NULL) != REDIS_OK) {
        client->refresh_sent_ms = lc_now_ms();
        cluster_refresh_soon(client);
        return;
    }
    client->refresh_inflight = 1;
    client->refresh_sent_ms = lc_now_ms();
    client->stats.refreshes++;
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_client *client = arg;
    lc_async_enter(client);
    if (!client->freeing)
        cluster_refresh_send(client);
    lc_async_leave(client);
}

/* Asks for a CLUSTER SLOTS soon: at once unless one was sent less than REFRESH_MIN_MS ago; one
 * in flight (answered within the command timeout) is followed by another when it is answered. */
static void cluster_refresh_soon(lc_async_client *client)
{
    if (client->freeing || !client->refresh)
        return;
    int64_t since = lc_now_ms() - client->refresh_sent_ms;
    if (client->refresh_inflight && since < client->opts.command_timeout_ms) {
        client->refresh_wanted = 1;
        return;
    }
    client->refresh_inflight = 0;
    if (evtimer_pending(client->refresh, NULL))
        return;
    arm(client->refresh, since >= REFRESH_MIN_MS ? 0 : REFRESH_MIN_MS - since);
}

static void on_slots_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    lc_async_client *client = privdata;
    const redisReply *r = reply;
    if (client->freeing)
        return;
    aconn *conn = ac->data;
    client->refresh_inflight = 0;
    lc_slotmap m;
    int ok = 0;
    if (r && lc_slotmap_parse(r, lc_route_host(client->route, conn->node), &m) == LC_OK) {
        /* A node that answers with no slot at all (not joined yet, or reset) is no map. */
        if (m.n > 0) {
            int changed = lc_route_apply(client->route, &m);
            ok = changed >= 0;
            if (changed > 0)
                client->stats.refresh_changes++;
        }
        lc_slotmap_clear(&m);
    }
    if (!ok || client->refresh_wanted) {
        client->refresh_wanted = 0;
        cluster_refresh_soon(client);
    }
}

/* Removes c from the parked list and resends it (or drops it when nobody needs it any more). */
static void cluster_unpark(acmd *c)
{
    lc_async_client *client = c->client;
    for (acmd **p = &client->parked; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    c->next = NULL;
    c->parked = 0;
    if (!c->op && !c->renew_of && !c->detached) {
        cmd_free(c); /* it did not run (TRYAGAIN): an acquire's undo is not needed either */
        return;
    }
    if (cmd_send(c) == 0)
        return;
    if (c->detached) {
        cmd_free(c);
        return;
    }
    /* Cannot be resent now: fail it as a command that did not leave. */
    lc_status st = lc_fail(LC_EIO, "redis cluster: not connected to the node after TRYAGAIN");
    if (c->renew_of) {
        lc_async_lock *l = c->renew_of;
        c->renew_of = NULL;
        l->renew_cmd = NULL;
        renew_on_reply(l, st, NULL);
    } else {
        aop *op = c->op;
        c->op = NULL;
        op->cmd = NULL;
        op_on(op, EV_REPLY, st, NULL, 0);
    }
    cmd_free(c);
}

/* Handles an error reply r to c (from conn's node) that is a cluster redirection. Returns 0:
 * not one to follow (report r); 1: followed (c resent, parked, or freed when nobody needs it);
 * -1: it should be resent but cannot be now (c did not run: report LC_EIO, not sent). */
static int cluster_redirect(acmd *c, const redisReply *r, aconn *conn)
{
    lc_async_client *client = c->client;
    lc_redirect rd;
    lc_redirect_kind kind =
        lc_redirect_parse(r->str, r->len, lc_route_host(client->route, conn->node), &rd);
    if (kind == LC_REDIRECT_NONE)
        return 0;
    if (kind == LC_REDIRECT_CLUSTERDOWN) {
        client->stats.clusterdown++;
        cluster_refresh_soon(client);
        return 0;
    }
    if (!c->op && !c->renew_of && !c->detached) {
        cmd_free(c); /* nobody waits, and it did not run (an acquire needs no undo) */
        return 1;
    }
    if (++c->redirects > REDIRECTS_MAX)
        return 0;
    int node;
    switch (kind) {
    case LC_REDIRECT_MOVED:
        client->stats.moved++;
        if ((node = lc_route_node(client->route, rd.host, rd.port)) < 0)
            return 0;
        lc_route_set_slot(client->route, rd.slot, node);
        cluster_refresh_soon(client); /* one slot moved: others may have too */
        break;
    case LC_REDIRECT_ASK:
        client->stats.ask++;
        if ((node = lc_route_node(client->route, rd.host, rd.port)) < 0)
            return 0;
        c->ask = node + 1;
        break;
    case LC_REDIRECT_TRYAGAIN: {
        client->stats.tryagain++;
        int64_t pause = (int64_t)TRYAGAIN_MIN_MS << (c->redirects < 7 ? c->redirects - 1 : 6);
        int64_t left = c->deadline_ms - lc_now_ms();
        if (left <= pause || !c->timer)
            return 0; /* the command timeout ends the retries: report TRYAGAIN */
        c->parked = 1;
        c->next = client->parked;
        client->parked = c;
        arm(c->timer, lc_jitter_ms((int)pause / 2 > 0 ? (int)pause / 2 : 1));
        return 1;
    }
    default: return 0;
    }
    return cmd_send(c) == 0 ? 1 : -1;
}

/* ---- the subscriber connection: channels and their waiters ---- */

static void on_sub_push(redisAsyncContext *ac, void *reply, void *privdata);

static chan *find_chan(lc_async_client *client, const char *name)
{
    for (chan *c = client->chans; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static void free_chan(lc_async_client *client, chan *c)
{
    for (chan **p = &client->chans; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    free(c->name);
    free(c);
}

/* Sends a SUBSCRIBE (1) or UNSUBSCRIBE (0) of c. 0, or -1 when the subscriber connection is
 * down or refused it (nothing changed). */
static int sub_request(lc_async_client *client, chan *c, int subscribe)
{
    redisAsyncContext *ac = client->subc.ac;
    if (!ac || client->freeing)
        return -1;
    const char *av[2] = {subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", c->name};
    if (redisAsyncCommandArgv(ac, subscribe ? on_sub_push : NULL, client, 2, av, NULL) != REDIS_OK)
        return -1;
    c->inflight++;
    c->want = subscribe;
    c->subscribed = 0;
    return 0;
}

/* Wakes the oldest sleeping waiter of c (one per unlock: no herd); with none asleep, the
 * unlock is kept for the next waiter to fall asleep. */
static void wake_one(lc_async_client *client, chan *c)
{
    for (aop *op = c->head; op; op = op->qnext)
        if (op->state == OPS_SLEEPING) {
            client->wakeups++;
            op_on(op, EV_UNLOCK, LC_OK, NULL, 0);
            return;
        }
    c->unclaimed++;
}

static void on_sub_push(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    lc_async_client *client = privdata;
    const redisReply *r = reply;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return; /* NULL: the connection is going; sub_lost deals with that */
    const char *kind = r->element[0]->str;
    chan *c = find_chan(client, r->element[1]->str);
    if (!c)
        return;
    if (strcmp(kind, "message") == 0) {
        wake_one(client, c);
        return;
    }
    if (strcmp(kind, "subscribe") != 0 && strcmp(kind, "unsubscribe") != 0)
        return;
    /* Confirmations come in the order the requests were sent: only the last one decides. */
    if (c->inflight == 0 || --c->inflight > 0)
        return;
    c->subscribed = c->want;
    if (!c->subscribed) {
        if (c->refs == 0)
            free_chan(client, c);
        return;
    }
    int resync = c->resync;
    c->resync = 0;
    /* Attempts never end an operation synchronously, so the list stays as it is. */
    for (aop *op = c->head, *next; op; op = next) {
        next = op->qnext;
        if (op->state == OPS_SUBSCRIBING) {
            op_on(op, EV_SUBSCRIBED, LC_OK, NULL, 0);
        } else if (resync && op->state == OPS_SLEEPING) {
            op->poll = LC_POLL_SUBSCRIBED_MIN_MS; /* subscribed again: the unlock wakes it */
            op->poll_max = LC_POLL_SUBSCRIBED_MAX_MS;
            op_on(op, EV_UNLOCK, LC_OK, NULL, 0); /* an unlock may have been missed meanwhile */
        }
    }
}

/* The subscriber connection went: nothing is subscribed any more. Subscribing waiters go on
 * without (their timer); sleepers poll alone until the subscription is back (the short back-off
 * of a waiter without one, their next poll brought forward to it); channels without waiters
 * go. */
static void sub_lost(lc_async_client *client)
{
    client->probe_out = 0;
    for (chan *c = client->chans, *next; c; c = next) {
        next = c->next;
        c->inflight = 0;
        c->want = 0;
        c->subscribed = 0;
        for (aop *op = c->head; op; op = op->qnext) {
            op->poll = LC_POLL_ALONE_MIN_MS;
            op->poll_max = LC_POLL_ALONE_MAX_MS;
            if (op->state == OPS_SLEEPING) {
                int64_t wait = lc_jitter_ms(op->poll), left = op->deadline_ms - lc_now_ms();
                arm(op->timer, wait < left ? wait : left > 0 ? left : 0);
            }
        }
        if (c->refs == 0)
            free_chan(client, c);
    }
}

/* The channel the liveness probe subscribes to (nothing is published there). */
static const char PROBE_CHANNEL[] = "lockcore:probe";

/* Redis confirmed a probe's SUBSCRIBE: the subscriber connection answers. NULL: it is going. */
static void on_sub_probe(redisAsyncContext *ac, void *reply, void *privdata)
{
    lc_async_client *client = privdata;
    const redisReply *r = reply;
    if (!r || client->freeing || ac != client->subc.ac)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "subscribe") == 0)
        client->probe_out = 0;
}

/*
 * The subscriber connection's liveness, every command timeout: nothing else is sent on it while
 * waiters sleep, so a node that stops answering (frozen, cut off) would hold every unlock of
 * the client back unnoticed, its waiters left to their slow fallback polls. A SUBSCRIBE of
 * PROBE_CHANNEL (hiredis 0.14 cannot route a PING's answer on a subscribed connection; Redis
 * confirms every SUBSCRIBE) must be confirmed before the next tick, and a connect must have
 * completed by then; otherwise the connection is dropped: its waiters poll alone meanwhile
 * (sub_lost), and it reconnects (on a cluster to the next node), subscribes again and wakes
 * every sleeper once confirmed (an unlock may have been missed).
 */
static void on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_client *client = arg;
    aconn *s = &client->subc;
    lc_async_enter(client);
    int timeout = client->opts.command_timeout_ms;
    if (s->ac && (client->probe_out || (!s->up && lc_now_ms() - s->opened_ms >= timeout))) {
        client->sub_drops++;
        conn_fail(s, "redis: the subscriber connection did not answer within the command timeout");
    } else if (s->ac && s->up) {
        const char *av[2] = {"SUBSCRIBE", PROBE_CHANNEL};
        if (redisAsyncCommandArgv(s->ac, on_sub_probe, client, 2, av, NULL) == REDIS_OK)
            client->probe_out = 1;
    }
    if (!client->freeing)
        arm(client->probe, timeout);
    lc_async_leave(client);
}

/* The subscriber connection is (re)opening: subscribe again to every channel with waiters. */
static void sub_connected(lc_async_client *client)
{
    for (chan *c = client->chans; c; c = c->next)
        if (c->refs > 0 && !c->want && sub_request(client, c, 1) == 0)
            c->resync = 1;
}

/* Adds op to the waiters of its lock's channel. 1: subscribed already; 0: a subscription is on
 * its way; -1: none possible now (subscriber connection down, out of memory). */
static int chan_join(aop *op)
{
    lc_async_client *client = op->client;
    const char *name = op->lock->h.channel;
    chan *c = find_chan(client, name);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c || !(c->name = strdup(name))) {
            free(c);
            return -1;
        }
        c->next = client->chans;
        client->chans = c;
    }
    op->ch = c;
    op->qnext = NULL;
    op->qprev = c->tail;
    if (c->tail)
        c->tail->qnext = op;
    else
        c->head = op;
    c->tail = op;
    c->refs++;
    if (c->subscribed)
        return 1;
    if (c->want)
        return 0;
    return sub_request(client, c, 1) == 0 ? 0 : -1;
}

/* Removes op from its channel's waiters; a woken waiter that did not take the lock passes the
 * wake-up on, so an unlock is never swallowed. The last waiter unsubscribes. */
static void chan_leave(aop *op, int pass)
{
    lc_async_client *client = op->client;
    chan *c = op->ch;
    if (!c)
        return;
    if (op->qprev)
        op->qprev->qnext = op->qnext;
    else
        c->head = op->qnext;
    if (op->qnext)
        op->qnext->qprev = op->qprev;
    else
        c->tail = op->qprev;
    op->ch = NULL;
    op->qprev = op->qnext = NULL;
    c->refs--;
    if (pass && c->refs > 0 && !client->freeing)
        wake_one(client, c);
    if (c->refs > 0)
        return;
    c->unclaimed = 0;
    if (c->want && sub_request(client, c, 0) == 0)
        return;
    if (c->inflight == 0 || !client->subc.ac)
        free_chan(client, c);
}

/* ---- renewal on a loop timer ---- */

static void renew_stop(lc_async_lock *l)
{
    if (l->renew)
        event_del(l->renew);
    if (l->renew_cmd) {
        l->renew_cmd->renew_of = NULL; /* its reply, if any, changes nothing */
        l->renew_cmd = NULL;
    }
}

static void renew_start(lc_async_lock *l)
{
    lc_async_client *client = l->client;
    if (!l->h.opts.watchdog || !client)
        return;
    if (!l->renew)
        l->renew = evtimer_new(client->base, on_renew_timer, l);
    l->renewed_ms = lc_now_ms();
    if (l->renew)
        arm(l->renew, lc_renew_period_ms(l->h.opts.lease_ms));
}

static void renew_on_reply(lc_async_lock *l, lc_status st, const redisReply *r)
{
    int64_t now = lc_now_ms();
    int verdict = lc_renew_verdict(lc_renew_result(st, r), now, l->renewed_ms, l->h.opts.lease_ms);
    if (verdict == LC_RENEW_OK) {
        l->renewed_ms = now;
        arm(l->renew, lc_renew_period_ms(l->h.opts.lease_ms));
    } else if (verdict == LC_RENEW_RETRY) {
        arm(l->renew, LC_RENEW_RETRY_MS);
    } else {
        atomic_store(&l->h.lost, 1);
        if (l->on_lost)
            l->on_lost(l, l->on_lost_arg); /* last: it may free the lock */
    }
}

static void on_renew_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_lock *l = arg;
    lc_async_client *client = l->client;
    lc_async_enter(client);
    int64_t now = lc_now_ms();
    int lease = l->h.opts.lease_ms;
    int64_t cap = l->h.opts.max_hold_ms ? l->h.held_since_ms + l->h.opts.max_hold_ms : 0;
    if (cap && cap - now <= 0)
        goto out; /* hold cap reached: let the lease run out */
    if (cap && cap - now < lease)
        lease = (int)(cap - now);
    lc_call call;
    acmd *c = NULL;
    if (lc_call_renew(&call, &l->h, lease) == LC_OK)
        c = cmd_new(client, &call, 1);
    lc_call_done(&call);
    if (c && cmd_send(c) == 0) {
        c->renew_of = l;
        l->renew_cmd = c;
    } else {
        cmd_free(c);
        renew_on_reply(l, LC_EIO, NULL);
    }
out:
    lc_async_leave(client);
}

/* ---- operations ---- */

static void on_op_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aop *op = arg;
    lc_async_client *client = op->client;
    lc_async_enter(client);
    if (op->state == OPS_ATTEMPT) /* a send that failed, now reported with its own message */
        op_on(op, EV_REPLY, lc_fail(op->deferred_st, "%s", op->deferred_msg), NULL, 0);
    else
        op_on(op, EV_TIMER, LC_OK, NULL, 0);
    lc_async_leave(client);
}

static void on_op_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aop *op = arg;
    lc_async_client *client = op->client;
    lc_async_enter(client);
    op_on(op, EV_DEADLINE, LC_OK, NULL, 0);
    lc_async_leave(client);
}

static aop *op_new_on(lc_async_client *client, lc_async_lock *l, op_kind kind, void *arg)
{
    aop *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    op->client = client;
    op->lock = l;
    op->kind = kind;
    op->arg = arg;
    op->timer = evtimer_new(client->base, on_op_timer, op);
    if (!op->timer) {
        free(op);
        return NULL;
    }
    op->next = client->ops;
    if (client->ops)
        client->ops->prev = op;
    client->ops = op;
    if (l)
        l->op = op;
    return op;
}

static aop *op_new(lc_async_lock *l, op_kind kind, void *arg)
{
    return op_new_on(l->client, l, kind, arg);
}

/* The operation's command failed before it left: the failure reaches the operation from the
 * loop, never from inside the call that started it. */
static void op_defer(aop *op, lc_status st)
{
    op->state = OPS_ATTEMPT;
    op->deferred_st = st;
    snprintf(op->deferred_msg, sizeof(op->deferred_msg), "%s", lc_errmsg());
    arm(op->timer, 0);
}

/* Sends c for op, or defers the failure. Takes c. */
static void op_send(aop *op, acmd *c)
{
    if (!c) {
        op_defer(op, lc_fail(LC_ENOMEM, "async: out of memory"));
        return;
    }
    op->state = OPS_ATTEMPT;
    if (cmd_send(c) != 0) {
        cmd_free(c);
        op_defer(op, lc_fail(LC_EIO, "redis: not connected"));
        return;
    }
    c->op = op;
    op->cmd = c;
}

/* Ends op: timers, channel, command; then its callback, exactly once, and the op is freed.
 * reply: borrowed by the callback (values of an acquire, the body's result of an eval). The
 * message of a failure is the one lc_fail recorded on the way here (in this call chain: the
 * thread's lc_errmsg() is lockcore's scratch, never read across loop turns); it travels with
 * the result: on the lock handle (lc_async_lock_errmsg) and as a reply callback's errstr. */
static void op_finish(aop *op, lc_status st, const redisReply *reply)
{
    lc_async_client *client = op->client;
    lc_async_lock *l = op->lock;
    char msg[LC_ERRSTR_MAX];
    snprintf(msg, sizeof(msg), "%s", st == LC_OK ? "" : lc_errmsg());
    if (l)
        memcpy(l->errstr, msg, sizeof(msg));
    chan_leave(op, op->woken && st != LC_OK);
    event_free(op->timer);
    if (op->deadline)
        event_free(op->deadline);
    if (op->cmd) {
        acmd *c = op->cmd;
        c->op = NULL;
        if (op->kind == OP_ACQUIRE && l && !client->freeing)
            c->undo = undo_cmd(l); /* if Redis runs it anyway, the hold is given back */
    }
    if (op->prev)
        op->prev->next = op->next;
    else
        client->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    if (l && l->op == op)
        l->op = NULL;
    switch (op->kind) {
    case OP_ACQUIRE:
        if (op->cb.acquire)
            op->cb.acquire(l, st, st == LC_OK && l ? l->h.fence : 0, st == LC_OK ? reply : NULL,
                           op->arg);
        break;
    case OP_EVAL:
        if (op->cb.eval)
            op->cb.eval(l, st, st == LC_OK ? reply : NULL, op->arg);
        break;
    case OP_RELEASE:
        if (op->cb.done)
            op->cb.done(l, st, op->arg);
        break;
    case OP_COMMAND:
        if (op->cb.reply)
            op->cb.reply(st, st == LC_OK ? reply : NULL, msg, op->arg);
        break;
    }
    for (int i = 0; i < op->nread; i++)
        free(op->read_keys[i]);
    free(op->read_keys);
    free(op->read_lens);
    free(op);
}

/* Sends the next acquire attempt of op. */
static void attempt(aop *op)
{
    lc_async_lock *l = op->lock;
    if (op->client->freeing)
        return;
    if (op->state == OPS_SLEEPING || op->state == OPS_SUBSCRIBING)
        event_del(op->timer);
    lc_call call;
    acmd *c = NULL;
    if (lc_call_acquire(&call, &l->h, op->nread, (const char *const *)op->read_keys,
                        op->read_lens) == LC_OK)
        c = cmd_new(op->client, &call, 1);
    lc_call_done(&call);
    op_send(op, c);
}

/* Busy (or no answer) while waiting: sleep until an unlock, the fallback poll or the deadline. */
static void op_sleep(aop *op, lc_status st, int64_t pttl)
{
    chan *c = op->ch;
    op->woken = 0;
    op->state = OPS_SLEEPING;
    if (c && c->unclaimed > 0) {
        /* An unlock came while this waiter's attempt was on its way and nobody slept. */
        c->unclaimed--;
        op->client->wakeups++;
        op->woken = 1;
        attempt(op);
        return;
    }
    int64_t wait = lc_jitter_ms(op->poll);
    op->poll = op->poll * 2 > op->poll_max ? op->poll_max : op->poll * 2;
    if (st == LC_EBUSY && pttl >= 0 && pttl + 1 < wait)
        wait = pttl + 1; /* the holder's lease ends first */
    int64_t remaining = op->deadline_ms - lc_now_ms();
    if (wait > remaining)
        wait = remaining;
    arm(op->timer, wait);
}

/* Applies an acquire's success to the lock: a fresh hold restarts renewal. */
static void acquired(lc_async_lock *l, const lc_acquired *a)
{
    if (a->fresh) {
        renew_stop(l);
        lc_hold_start(&l->h, a);
        renew_start(l);
    }
    l->h.count = a->count;
}

/* The acquire state machine: (state, event) -> next step. */
static void acquire_on(aop *op, op_event ev, lc_status st, redisReply *r, int sent)
{
    lc_async_lock *l = op->lock;
    switch (ev) {
    case EV_REPLY: {
        if (st == LC_EIO && sent) {
            /* It may have run: undo it (queued until the data connection is back). */
            acmd *undo = undo_cmd(l);
            if (undo)
                send_detached(undo);
        }
        lc_acquired a;
        st = lc_hold_on_acquire(&l->h, st, r, op->nread, &a);
        if (st == LC_OK) {
            acquired(l, &a);
            op_finish(op, LC_OK, lc_acquire_values(r));
            return;
        }
        int first = op->attempts++ == 0;
        op->last_st = st;
        if (op->wait_ms == 0 || (st != LC_EBUSY && (first || st != LC_EIO))) {
            op_finish(op, st, NULL);
            return;
        }
        if (op->deadline_passed || op->deadline_ms - lc_now_ms() <= 0) {
            op_finish(op,
                      st == LC_EBUSY ? lc_fail(LC_ETIMEOUT, "lock %s: not acquired within %d ms",
                                               l->h.name, op->wait_ms)
                                     : st,
                      NULL);
            return;
        }
        if (first) {
            /* Subscribe first, then retry: an unlock published after the retry failed must
             * reach us, and one published before it is seen by the retry itself. */
            int ready = chan_join(op);
            op->poll = ready >= 0 ? LC_POLL_SUBSCRIBED_MIN_MS : LC_POLL_ALONE_MIN_MS;
            op->poll_max = ready >= 0 ? LC_POLL_SUBSCRIBED_MAX_MS : LC_POLL_ALONE_MAX_MS;
            if (ready == 0) {
                op->state = OPS_SUBSCRIBING;
                int64_t wait = op->deadline_ms - lc_now_ms();
                if (wait > op->client->opts.command_timeout_ms)
                    wait = op->client->opts.command_timeout_ms;
                arm(op->timer, wait);
                return;
            }
            attempt(op);
            return;
        }
        op_sleep(op, st, a.pttl);
        return;
    }
    case EV_SUBSCRIBED:
        if (op->state == OPS_SUBSCRIBING)
            attempt(op);
        return;
    case EV_TIMER:
        if (op->state == OPS_SUBSCRIBING) {
            /* The subscription is too slow: go on polling alone. */
            op->poll = LC_POLL_ALONE_MIN_MS;
            op->poll_max = LC_POLL_ALONE_MAX_MS;
            attempt(op);
        } else if (op->state == OPS_SLEEPING) {
            attempt(op);
        }
        return;
    case EV_UNLOCK:
        if (op->state == OPS_SLEEPING) {
            op->woken = 1;
            attempt(op);
        }
        return;
    case EV_DEADLINE:
        op->deadline_passed = 1;
        if (op->state == OPS_SUBSCRIBING || op->state == OPS_SLEEPING)
            op_finish(
                op,
                op->last_st == LC_EIO
                    ? lc_fail(LC_EIO, "lock %s: Redis unreachable until the deadline", l->h.name)
                    : lc_fail(LC_ETIMEOUT, "lock %s: not acquired within %d ms", l->h.name,
                              op->wait_ms),
                NULL);
        return; /* an attempt in flight decides when answered */
    }
}

static acmd *release_cmd(lc_async_lock *l, int holds)
{
    lc_call call;
    acmd *c = NULL;
    if (lc_call_release(&call, &l->h, holds) == LC_OK)
        c = cmd_new(l->client, &call, 1);
    lc_call_done(&call);
    return c;
}

static void eval_on(aop *op, lc_status st, redisReply *r)
{
    lc_async_lock *l = op->lock;
    int dropped;
    if (op->state == OPS_RELEASING) {
        lc_hold_on_release(&l->h, st, r, &dropped);
        if (dropped)
            renew_stop(l);
        op_finish(op, lc_fail(op->eval_st, "%s", op->deferred_msg), NULL); /* the body's */
        return;
    }
    int release_alone;
    redisReply *body = NULL;
    st = lc_hold_on_eval(&l->h, op->release, st, r, &body, &dropped, &release_alone);
    if (dropped)
        renew_stop(l);
    if (release_alone && l->h.count > 0) {
        op->eval_st = st;
        snprintf(op->deferred_msg, sizeof(op->deferred_msg),
                 "eval: body failed before the release: %s", lc_errmsg());
        if (l->h.count == 1)
            renew_stop(l);
        op_send(op, release_cmd(l, l->h.count));
        op->state = op->cmd ? OPS_RELEASING : OPS_ATTEMPT;
        if (op->state == OPS_RELEASING)
            return;
        /* Not sent: report the eval's own failure; the release counts as unknown. */
        lc_hold_on_release(&l->h, LC_EIO, NULL, &dropped);
        event_del(op->timer);
    }
    op_finish(op, st, body);
    if (body)
        freeReplyObject(body);
}

/* Dispatches an event to op's kind. A command or eval that never left is LC_EDOWN, not
 * LC_EIO: its caller knows nothing changed (the message stays). */
static void op_on(aop *op, op_event ev, lc_status st, redisReply *r, int sent)
{
    if (ev == EV_REPLY && st == LC_EIO && !sent && (op->kind == OP_EVAL || op->kind == OP_COMMAND))
        st = LC_EDOWN;
    switch (op->kind) {
    case OP_ACQUIRE: acquire_on(op, ev, st, r, sent); return;
    case OP_EVAL:
        if (ev == EV_REPLY)
            eval_on(op, st, r);
        return;
    case OP_COMMAND:
        if (ev == EV_REPLY)
            op_finish(op, st, r);
        return;
    case OP_RELEASE:
        if (ev == EV_REPLY) {
            int dropped;
            st = lc_hold_on_release(&op->lock->h, st, r, &dropped);
            if (dropped)
                renew_stop(op->lock);
            op_finish(op, st, NULL);
        }
        return;
    }
}

/* ---- public API ---- */

lc_status lc_async_client_new(struct event_base *base, const char *url, const lc_client_opts *opts,
                              lc_async_client **out)
{
    if (out)
        *out = NULL;
    if (!base || !url || !out)
        return lc_fail(LC_EINVAL, "async client: NULL argument");
    lc_async_client *c = calloc(1, sizeof(*c));
    if (!c)
        return lc_fail(LC_ENOMEM, "async client: out of memory");
    lc_client_opts_init(&c->opts);
    if (opts) {
        if (opts->command_timeout_ms <= 0) {
            free(c);
            return lc_fail(LC_EINVAL, "async client: command_timeout_ms must be > 0");
        }
        c->opts = *opts;
    }
    lc_status st = lc_url_parse(url, &c->url);
    if (st != LC_OK) {
        free(c);
        return st;
    }
    c->base = base;
    c->data.client = c->subc.client = c;
    c->data.node = c->subc.node = -1;
    c->subc.sub = 1;
    c->data.reconnect = evtimer_new(base, on_reconnect_timer, &c->data);
    c->subc.reconnect = evtimer_new(base, on_reconnect_timer, &c->subc);
    c->probe = evtimer_new(base, on_probe_timer, c);
    int ok = c->data.reconnect && c->subc.reconnect && c->probe && lc_builtin_script(LC_S_ACQUIRE);
    if (ok && c->url.cluster) {
        const char *hosts[LC_URL_SEEDS_MAX];
        int ports[LC_URL_SEEDS_MAX];
        for (int i = 0; i < c->url.nseeds; i++) {
            hosts[i] = c->url.seeds[i].host;
            ports[i] = c->url.seeds[i].port;
        }
        c->route = lc_route_new(c->url.nseeds, hosts, ports);
        c->refresh = evtimer_new(base, on_refresh_timer, c);
        ok = c->route && c->refresh;
    }
    if (!ok) {
        lc_async_client_free(c);
        return lc_fail(LC_ENOMEM, "async client: out of memory");
    }
    if (c->route) {
        c->refresh_sent_ms = lc_now_ms() - REFRESH_MIN_MS;
        cluster_refresh_send(c); /* the slot map; commands sent before it follow MOVED */
    } else {
        conn_open(&c->data);
    }
    conn_open(&c->subc);
    arm(c->probe, c->opts.command_timeout_ms);
    *out = c;
    return LC_OK;
}

void lc_async_client_free(lc_async_client *client)
{
    if (!client || client->freeing)
        return;
    if (client->depth > 0) {
        client->free_requested = 1; /* inside lockcore's code: finished by lc_async_leave */
        return;
    }
    client->depth++;
    client->freeing = 1;
    while (client->ops)
        op_finish(client->ops, lc_fail(LC_ESTATE, "async client freed"), NULL);
    for (lc_async_lock *l = client->locks; l; l = l->next) {
        renew_stop(l);
        if (l->renew)
            event_free(l->renew);
        l->renew = NULL;
        l->client = NULL;
    }
    client->locks = NULL;
    client->depth--;
    /* Every command still in flight gets its NULL reply here; none has an operation any more. */
    for (int i = -2; i < client->nnodes; i++) {
        aconn *conn = i == -2 ? &client->data : i == -1 ? &client->subc : client->nodes[i];
        if (!conn)
            continue;
        redisAsyncContext *ac = conn->ac;
        conn->ac = NULL;
        if (ac)
            redisAsyncFree(ac);
        if (conn->reconnect)
            event_free(conn->reconnect);
        if (i >= 0)
            free(conn);
    }
    free(client->nodes);
    while (client->parked) {
        acmd *c = client->parked;
        client->parked = c->next;
        cmd_free(c);
    }
    if (client->refresh)
        event_free(client->refresh);
    if (client->probe)
        event_free(client->probe);
    lc_route_free(client->route);
    while (client->chans)
        free_chan(client, client->chans);
    while (client->deferred) {
        acmd *c = client->deferred;
        client->deferred = c->next;
        cmd_free(c);
    }
    free(client);
}

lc_status lc_async_lock_new(lc_async_client *client, const char *name, const lc_lock_opts *opts,
                            lc_async_lost_fn on_lost, void *on_lost_arg, lc_async_lock **out)
{
    if (out)
        *out = NULL;
    if (!client || !name || !out)
        return lc_fail(LC_EINVAL, "async lock: NULL argument");
    if (opts && opts->on_lost)
        return lc_fail(LC_EINVAL, "async lock: opts->on_lost must be NULL (pass on_lost)");
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async lock: client is being freed");
    lc_async_lock *l = calloc(1, sizeof(*l));
    if (!l)
        return lc_fail(LC_ENOMEM, "async lock: out of memory");
    lc_status st = lc_hold_init(&l->h, name, opts);
    if (st != LC_OK) {
        free(l);
        return st;
    }
    l->client = client;
    l->on_lost = on_lost;
    l->on_lost_arg = on_lost_arg;
    l->next = client->locks;
    if (client->locks)
        client->locks->prev = l;
    client->locks = l;
    *out = l;
    return LC_OK;
}

void lc_async_lock_free(lc_async_lock *lock)
{
    if (!lock)
        return;
    lc_async_client *client = lock->client;
    if (lock->op)
        op_finish(lock->op, lc_fail(LC_ESTATE, "async lock freed"), NULL);
    renew_stop(lock);
    if (lock->renew)
        event_free(lock->renew);
    if (client) {
        if (lock->h.count > 0 && !client->freeing)
            send_detached(release_cmd(lock, 1)); /* all holds at once: the lock is deleted */
        if (lock->prev)
            lock->prev->next = lock->next;
        else if (client->locks == lock)
            client->locks = lock->next;
        if (lock->next)
            lock->next->prev = lock->prev;
    }
    lc_hold_clear(&lock->h);
    free(lock);
}

/* Common checks of an operation's start: LC_OK, or LC_EINVAL/LC_ESTATE. */
static lc_status can_start(lc_async_lock *lock)
{
    if (!lock)
        return lc_fail(LC_EINVAL, "async: NULL lock");
    if (!lock->client || lock->client->freeing)
        return lc_fail(LC_ESTATE, "async lock %s: its client was freed", lock->h.name);
    if (lock->op)
        return lc_fail(LC_ESTATE, "async lock %s: another operation is in flight", lock->h.name);
    return LC_OK;
}

lc_status lc_async_lock_acquire(lc_async_lock *lock, int wait_ms, int nread,
                                const char *const *read_keys, const size_t *read_keylens,
                                lc_async_acquire_fn cb, void *arg)
{
    lc_status st = can_start(lock);
    if (st != LC_OK)
        return st;
    if (wait_ms < 0 || nread < 0 || (nread && !read_keys))
        return lc_fail(LC_EINVAL, "acquire: wait_ms and nread must be >= 0");
    for (int i = 0; i < nread; i++)
        if (!read_keys[i])
            return lc_fail(LC_EINVAL, "acquire: read key %d is NULL", i);
    aop *op = op_new(lock, OP_ACQUIRE, arg);
    if (!op)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    op->cb.acquire = cb;
    op->wait_ms = wait_ms;
    op->deadline_ms = lc_now_ms() + wait_ms;
    if (nread > 0) {
        op->read_keys = calloc((size_t)nread, sizeof(*op->read_keys));
        op->read_lens = calloc((size_t)nread, sizeof(*op->read_lens));
        int ok = op->read_keys && op->read_lens;
        for (int i = 0; ok && i < nread; i++) {
            size_t len = read_keylens ? read_keylens[i] : strlen(read_keys[i]);
            if (!(op->read_keys[i] = malloc(len + 1))) {
                ok = 0;
                break;
            }
            memcpy(op->read_keys[i], read_keys[i], len);
            op->read_keys[i][len] = '\0';
            op->read_lens[i] = len;
            op->nread = i + 1;
        }
        if (!ok) {
            op->cb.acquire = NULL; /* not started: no callback */
            op_finish(op, LC_ENOMEM, NULL);
            return lc_fail(LC_ENOMEM, "async: out of memory");
        }
    }
    if (wait_ms > 0) {
        op->deadline = evtimer_new(lock->client->base, on_op_deadline, op);
        if (!op->deadline) {
            op->cb.acquire = NULL;
            op_finish(op, LC_ENOMEM, NULL);
            return lc_fail(LC_ENOMEM, "async: out of memory");
        }
        arm(op->deadline, wait_ms);
    }
    attempt(op);
    return LC_OK;
}

lc_status lc_async_lock_try(lc_async_lock *lock, int nread, const char *const *read_keys,
                            const size_t *read_keylens, lc_async_acquire_fn cb, void *arg)
{
    return lc_async_lock_acquire(lock, 0, nread, read_keys, read_keylens, cb, arg);
}

lc_status lc_async_eval(lc_async_lock *lock, const lc_script *script, int flags, int nkeys,
                        const char **keys, const size_t *keylens, int nargs, const char **args,
                        const size_t *arglens, lc_async_eval_fn cb, void *arg)
{
    lc_status st = can_start(lock);
    if (st != LC_OK)
        return st;
    if ((st = lc_eval_check(script, flags, nkeys, keys, nargs, args)) != LC_OK)
        return st;
    aop *op = op_new(lock, OP_EVAL, arg);
    if (!op)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    op->cb.eval = cb;
    op->release = flags & LC_EVAL_RELEASE;
    if ((st = lc_hold_need(&lock->h)) != LC_OK) {
        op_defer(op, st);
        return LC_OK;
    }
    lc_call call;
    acmd *c = NULL;
    if (lc_call_eval(&call, &lock->h, script, op->release, nkeys, keys, keylens, nargs, args,
                     arglens) == LC_OK)
        c = cmd_new(lock->client, &call, 0);
    lc_call_done(&call);
    if (c && op->release && lock->h.count == 1)
        renew_stop(lock); /* renewal stops before the release is sent */
    op_send(op, c);
    return LC_OK;
}

static lc_status command_start(lc_async_client *client, acmd *c, lc_async_reply_fn cb, void *arg);

/* The caller's callback of a detached eval, and the unwrapping of the guard's reply. */
typedef struct detached {
    lc_async_reply_fn cb;
    void *arg;
} detached;

static void detached_on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    detached d = *(detached *)arg;
    free(arg);
    const redisReply *body = NULL;
    if (st == LC_OK && (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                        r->element[0]->type != REDIS_REPLY_INTEGER)) {
        st = LC_EREDIS;
        errstr = "eval: unexpected reply (not made by lc_fenced_script_new?)";
    } else if (st == LC_OK && r->element[0]->integer == 0) {
        st = LC_ELOST;
        errstr = "lost (the fencing token is stale): nothing ran";
    } else if (st == LC_OK && r->elements > 1) {
        body = r->element[1];
    }
    d.cb(st, body, errstr, d.arg);
}

lc_status lc_async_eval_detached(lc_async_lock *lock, const lc_script *script, int nkeys,
                                 const char **keys, const size_t *keylens, int nargs,
                                 const char **args, const size_t *arglens, lc_async_reply_fn cb,
                                 void *arg)
{
    if (!lock || !cb)
        return lc_fail(LC_EINVAL, "async: NULL lock or callback");
    if (!lock->client || lock->client->freeing)
        return lc_fail(LC_ESTATE, "async lock %s: its client was freed", lock->h.name);
    lc_status st = lc_eval_check(script, 0, nkeys, keys, nargs, args);
    if (st == LC_OK)
        st = lc_hold_need(&lock->h);
    if (st != LC_OK)
        return st;
    detached *d = malloc(sizeof(*d));
    if (!d)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    d->cb = cb;
    d->arg = arg;
    lc_call call;
    acmd *c = NULL;
    if (lc_call_eval(&call, &lock->h, script, 0, nkeys, keys, keylens, nargs, args, arglens) ==
        LC_OK)
        c = cmd_new(lock->client, &call, 0);
    lc_call_done(&call);
    st = command_start(lock->client, c, detached_on_reply, d);
    if (st != LC_OK)
        free(d);
    return st;
}

lc_status lc_async_release(lc_async_lock *lock, lc_async_done_fn cb, void *arg)
{
    lc_status st = can_start(lock);
    if (st != LC_OK)
        return st;
    aop *op = op_new(lock, OP_RELEASE, arg);
    if (!op)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    op->cb.done = cb;
    if ((st = lc_hold_need(&lock->h)) != LC_OK) {
        op_defer(op, st);
        return LC_OK;
    }
    acmd *c = release_cmd(lock, lock->h.count);
    if (c && lock->h.count == 1)
        renew_stop(lock); /* renewal stops before the release is sent */
    op_send(op, c);
    return LC_OK;
}

int lc_async_lock_held(const lc_async_lock *lock)
{
    return lock ? lock->h.count : 0;
}

int lc_async_lock_lost(const lc_async_lock *lock)
{
    return lock ? atomic_load(&((lc_async_lock *)lock)->h.lost) : 0;
}

uint64_t lc_async_lock_fence(const lc_async_lock *lock)
{
    return lock ? lock->h.fence : 0;
}

const char *lc_async_lock_name(const lc_async_lock *lock)
{
    return lock ? lock->h.name : "";
}

const char *lc_async_lock_errmsg(const lc_async_lock *lock)
{
    return lock ? lock->errstr : "";
}

const char *lc_async_lock_token(const lc_async_lock *lock)
{
    return lock ? lock->h.token : "";
}

long lc_async_debug_wakeups(const lc_async_client *client)
{
    return client->wakeups;
}

int lc_async_debug_sleepers(const lc_async_client *client, const char *name)
{
    char channel[LC_NAME_MAX + 16];
    snprintf(channel, sizeof(channel), "%s:unlock", name);
    int n = 0;
    for (chan *c = client->chans; c; c = c->next)
        if (strcmp(c->name, channel) == 0)
            for (aop *op = c->head; op; op = op->qnext)
                n += op->state == OPS_SLEEPING && c->subscribed;
    return n;
}

int lc_async_debug_sub_port(const lc_async_client *client)
{
    if (!client->subc.up)
        return -1;
    if (client->route)
        return lc_route_port(client->route, client->subc.node);
    return client->url.port;
}

long lc_async_debug_sub_drops(const lc_async_client *client)
{
    return client->sub_drops;
}

int lc_async_debug_connected(const lc_async_client *client)
{
    for (int i = 0; i < client->nnodes; i++)
        if (client->nodes[i] && client->nodes[i]->up)
            return 1;
    return client->data.up;
}

void lc_async_debug_cluster(const lc_async_client *client, lc_cluster_stats *out)
{
    *out = client->stats;
    out->known_slots = client->route ? lc_route_known(client->route) : 0;
}

int lc_async_debug_slot_port(const lc_async_client *client, int slot)
{
    int node = client->route ? lc_route_slot(client->route, slot) : -1;
    return node < 0 ? -1 : lc_route_port(client->route, node);
}

/* ---- plain commands and scripts (no lock) ---- */

/* A command record holding a copy of argv (sent as it is). NULL when out of memory. */
static acmd *cmd_new_raw(lc_async_client *client, int argc, const char *const *argv,
                         const size_t *lens)
{
    size_t bytes = 0;
    for (int i = 0; i < argc; i++)
        bytes += (lens ? lens[i] : strlen(argv[i])) + 1;
    acmd *c =
        calloc(1, sizeof(*c) + sizeof(char *) * (size_t)argc + sizeof(size_t) * (size_t)argc + bytes);
    if (!c)
        return NULL;
    c->client = client;
    c->argc = argc;
    c->argv = (const char **)(c + 1);
    c->lens = (size_t *)(c->argv + argc);
    c->slot = -1;
    char *p = (char *)(c->lens + argc);
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        memcpy(p, argv[i], n);
        p[n] = '\0';
        c->argv[i] = p;
        c->lens[i] = n;
        p += n + 1;
    }
    if (client->route) {
        int k = lc_command_key(argc, c->argv, c->lens);
        c->slot = k < 0 ? -1 : lc_key_slot(c->argv[k], c->lens[k]);
    }
    return c;
}

/* Starts op for the command c (taken). */
static lc_status command_start(lc_async_client *client, acmd *c, lc_async_reply_fn cb, void *arg)
{
    aop *op = c ? op_new_on(client, NULL, OP_COMMAND, arg) : NULL;
    if (!op) {
        cmd_free(c);
        return lc_fail(LC_ENOMEM, "async: out of memory");
    }
    op->cb.reply = cb;
    op_send(op, c);
    return LC_OK;
}

/* The checks every plain command call makes: a live client and argc non-NULL arguments (the
 * caller has checked client, argc and argv themselves). */
static lc_status command_args_ok(const lc_async_client *client, int argc,
                                 const char *const *argv)
{
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async command: the client was freed");
    for (int i = 0; i < argc; i++)
        if (!argv[i])
            return lc_fail(LC_EINVAL, "async command: argument %d is NULL", i);
    return LC_OK;
}

lc_status lc_async_command(lc_async_client *client, int argc, const char *const *argv,
                           const size_t *lens, lc_async_reply_fn cb, void *arg)
{
    if (!client || argc <= 0 || !argv)
        return lc_fail(LC_EINVAL, "async command: bad arguments");
    lc_status chk = command_args_ok(client, argc, argv);
    if (chk != LC_OK)
        return chk;
    return command_start(client, cmd_new_raw(client, argc, argv, lens), cb, arg);
}

lc_status lc_async_command_masters(lc_async_client *client, int argc, const char *const *argv,
                                   const size_t *lens, lc_async_reply_fn cb, void *arg,
                                   int *sent)
{
    if (sent)
        *sent = 0;
    if (!client || argc <= 0 || !argv || !sent)
        return lc_fail(LC_EINVAL, "async command: bad arguments");
    lc_status chk = command_args_ok(client, argc, argv);
    if (chk != LC_OK)
        return chk;
    if (!client->route) {
        lc_status st = command_start(client, cmd_new_raw(client, argc, argv, lens), cb, arg);
        *sent = st == LC_OK;
        return st;
    }
    int n = lc_route_nodes(client->route);
    int *slots = malloc(sizeof(*slots) * (size_t)(n > 0 ? n : 1));
    if (!slots)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    int masters = lc_route_master_slots(client->route, slots, n);
    lc_status st = masters > 0 ? LC_OK : lc_fail(LC_ESTATE, "async command: no master known yet");
    for (int i = 0; i < masters && st == LC_OK; i++) {
        acmd *c = cmd_new_raw(client, argc, argv, lens);
        if (c)
            c->slot = slots[i]; /* routed like a key of that slot: to its master */
        st = command_start(client, c, cb, arg);
        *sent += st == LC_OK;
    }
    free(slots);
    return st;
}

lc_status lc_async_command_key(lc_async_client *client, const char *key, size_t keylen, int argc,
                               const char *const *argv, const size_t *lens, lc_async_reply_fn cb,
                               void *arg)
{
    if (!client || !key || argc <= 0 || !argv)
        return lc_fail(LC_EINVAL, "async command: bad arguments");
    lc_status chk = command_args_ok(client, argc, argv);
    if (chk != LC_OK)
        return chk;
    acmd *c = cmd_new_raw(client, argc, argv, lens);
    if (c && client->route)
        c->slot = lc_key_slot(key, keylen);
    return command_start(client, c, cb, arg);
}

int lc_async_reply_conn(const lc_async_client *client, lc_async_conn_ref *out)
{
    if (!client || !out)
        return -1;
    const aconn *conn = client->reply_conn;
    if (!conn)
        return -1;
    out->node = conn->node;
    out->gen = client->reply_gen;
    return 0;
}

lc_status lc_async_wait(lc_async_client *client, const lc_async_conn_ref *ref, int numreplicas,
                        int timeout_ms, lc_async_reply_fn cb, void *arg)
{
    if (!client || !ref || numreplicas < 0 || timeout_ms < 0)
        return lc_fail(LC_EINVAL, "async wait: bad arguments");
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async wait: the client was freed");
    aconn *conn = NULL;
    if (!client->route)
        conn = ref->node == -1 ? &client->data : NULL;
    else if (ref->node >= 0 && ref->node < client->nnodes)
        conn = client->nodes[ref->node];
    if (!conn)
        return lc_fail(LC_EINVAL, "async wait: not a connection of this client");
    char n[16], ms[16];
    snprintf(n, sizeof(n), "%d", numreplicas);
    snprintf(ms, sizeof(ms), "%d", timeout_ms);
    const char *argv[3] = {"WAIT", n, ms};
    acmd *c = cmd_new_raw(client, 3, argv, NULL);
    if (c) {
        c->pin = conn;
        c->pin_gen = ref->gen;
    }
    /* A connection gone since (or going) fails the WAIT with LC_EDOWN from the loop (op_send):
     * never sent. */
    return command_start(client, c, cb, arg);
}

lc_status lc_async_script(lc_async_client *client, const lc_script *script, int nkeys,
                          const char *const *keys, const size_t *keylens, int nargs,
                          const char *const *args, const size_t *arglens, lc_async_reply_fn cb,
                          void *arg)
{
    enum { INLINE = 16 };
    if (!client || !script || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args))
        return lc_fail(LC_EINVAL, "async script: bad arguments");
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async script: the client was freed");
    size_t klv[INLINE], alv[INLINE];
    size_t *kl = nkeys <= INLINE ? klv : malloc(sizeof(*kl) * (size_t)nkeys);
    size_t *al = nargs <= INLINE ? alv : malloc(sizeof(*al) * (size_t)nargs);
    lc_status st = lc_fail(LC_ENOMEM, "async: out of memory");
    if (kl && al) {
        for (int i = 0; i < nkeys; i++)
            kl[i] = keylens ? keylens[i] : strlen(keys[i]);
        for (int i = 0; i < nargs; i++)
            al[i] = arglens ? arglens[i] : strlen(args[i]);
        lc_call call;
        memset(&call, 0, sizeof(call));
        call.script = script;
        call.nkeys = nkeys;
        call.nargs = nargs;
        call.keys = (const char **)keys;
        call.args = (const char **)args;
        call.keylens = kl;
        call.arglens = al;
        st = command_start(client, cmd_new(client, &call, 0), cb, arg);
    }
    if (kl != klv)
        free(kl);
    if (al != alv)
        free(al);
    return st;
}

struct event_base *lc_async_client_base(const lc_async_client *client)
{
    return client->base;
}

void lc_async_mark_loop_thread(int on)
{
    lc_in_loop += on ? 1 : -1;
}
