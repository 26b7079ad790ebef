/*
 * The ZooKeeper lock on an event loop (lockcore_zk.h): Curator's InterProcessMutex over
 * libzookeeper-mt's asynchronous API.
 *
 * Threads: the library calls completions and watchers on its completion thread. Each of them
 * only fills the zreq it was given (or a new one for a watcher event), appends it to the
 * client's queue under a mutex and writes one byte to a pipe; the loop's read event on the pipe
 * drains the queue and does everything else. So all lock state is touched by the loop thread
 * only, and every user callback runs there.
 *
 * Acquire, as a state machine of the handle (each step ends by sending one request or by
 * waiting for a watch):
 *
 *   S_CREATE    create <parent>/<token>-<attempt>-lock- EPHEMERAL|SEQUENCE (zoo_acreate2: the
 *               Stat gives czxid, the fencing token). ZNONODE: S_PARENT first.
 *   S_PARENT    create /<prefix> (persistent) then /<prefix>/<name> (a container, which the
 *               server deletes once empty); ZNODEEXISTS is fine.
 *   S_CHILDREN  list the parent: lowest sequence is ours -> held; else wait_ms 0 -> delete our
 *               node, LC_EBUSY; else S_EXISTS on the node just before ours.
 *   S_EXISTS    exists(predecessor, watch): ZNONODE -> S_CHILDREN again; exists -> S_WAIT.
 *   S_WAIT      no request: the predecessor's deletion (a watch event) -> S_CHILDREN.
 *   S_BASE      ours is the lowest: read the token base, the data of /<prefix> (a decimal, empty:
 *               0) -> held, token = base + our node's czxid. Read after winning, on our
 *               session: a later holder reads it after our node's deletion, so never a smaller
 *               base (docs/lockcore.md, "Token sources that go back").
 *   deadline    while waiting: our node deleted, LC_ETIMEOUT; an answer in flight is awaited
 *               (if it says we hold the lock, LC_OK).
 *
 * Ownership: a zreq is freed by the loop when its answer has been handled. A zreq whose handle
 * went away (freed, or its operation ended by a deadline) is detached (lk NULL): its answer
 * only cleans up (a node created for nobody is deleted). A node whose deletion failed for want
 * of an answer is deleted again by the client's background list (bg_*) every RETRY_MS while
 * connected, until ZooKeeper answers, the session ends, or the client is freed: our own session
 * keeps an orphan node alive and would block the queue behind it. A create whose answer was lost
 * (connection loss) may have made a node we do not know the name of: it is found by its
 * <token>-<attempt>- prefix (Curator's "protected" mode) and deleted the same way.
 *
 * Base raise (lc_zk_client_raise, after a fenced commit refused with the store's seen token):
 * in the background, get /<prefix> -> base below seen: setData(seen) at the version read
 * (ZBADVERSION: get again; ZNONODE: create it with seen), a few attempts; nobody waits for it.
 *
 * Session: see lockcore_zk.h. ZOO_CONNECTING_STATE makes the client suspect and arms a timer of
 * one session timeout; ZOO_CONNECTED_STATE cancels it; the timer or ZOO_EXPIRED_SESSION_STATE
 * loses every hold and fails every acquire in flight with LC_EIO; a new session starts at once,
 * and the expired handle is closed once the library has answered its requests (zctx counts
 * them: zookeeper_close drops pending completions, and their zreqs with them), at most 2 s later.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <zookeeper/zookeeper.h>

#include "anylock_internal.h"
#include "async_internal.h"
#include "base_internal.h"
#include "lockcore/lockcore_zk.h"

enum { RETRY_MS = 200, SEQ_DIGITS = 10 };

typedef enum zkind {
    Z_PARENT1,  /* create /<prefix> */
    Z_PARENT2,  /* create /<prefix>/<name> */
    Z_CREATE,   /* create our node */
    Z_CHILDREN, /* list the queue */
    Z_EXISTS,   /* exists + watch on the predecessor */
    Z_DELETE,   /* release: delete our node */
    Z_BG_DELETE,
    Z_BG_LIST,   /* background: list a parent to find a node by prefix */
    Z_PROBE,     /* the session's keep-alive: exists("/"), only to time an answer */
    Z_BASE,      /* get /<prefix>: the token base, once our node is the lowest */
    Z_RAISE_GET, /* background: get /<prefix> to raise its base */
    Z_RAISE_SET, /* background: setData /<prefix> (or create it) with the raised base */
    Z_WATCH      /* a watcher event (session or node) */
} zkind;

typedef enum zstep {
    S_IDLE,
    S_PARENT,
    S_CREATE,
    S_CHILDREN,
    S_EXISTS,
    S_WAIT,
    S_BASE,
    S_DELETE
} zstep;
typedef enum zop { ZOP_NONE, ZOP_ACQUIRE, ZOP_RELEASE, ZOP_EVAL } zop;

typedef struct zreq {
    struct zreq *next;
    lc_zk_client *c;
    lc_zk_lock *lk; /* NULL: detached (answer only cleans up) */
    zkind kind;
    unsigned gen; /* the session (zhandle) it was sent on */
    int rc;
    char *path;        /* Z_CREATE: the path created; BG: the node or parent; Z_WATCH: the path */
    char *match;       /* Z_BG_LIST: "<token>-": the owner's nodes */
    unsigned upto;     /* Z_BG_LIST: delete the owner's attempts up to this one */
    lc_zk_lock *owner; /* Z_BG_LIST: the handle whose sweep this is (NULL once freed) */
    struct zctx *x;    /* the session it was last sent on */
    int64_t czxid;
    uint64_t base;   /* Z_BASE, Z_RAISE_GET: the base read */
    uint64_t want;   /* Z_RAISE_*: the seen token to raise the base to */
    int version;     /* Z_RAISE_*: /<prefix>'s data version read */
    int base_bad;    /* the data of /<prefix> is not a decimal token base */
    int tries;       /* Z_RAISE_*: attempts left */
    int64_t sent_ms; /* CLOCK_MONOTONIC when it was handed to the library (presend) */
    int nkids;
    char **kids;
    int type, state;      /* Z_WATCH */
    struct zreq *bg_next; /* in the client's retry list */
} zreq;

/* The context of one zhandle's global watcher: which client and which session. */
typedef struct zctx {
    lc_zk_client *c;
    unsigned gen;
    zhandle_t *zh;
    _Atomic int in_library; /* its requests the library has not answered yet */
    int64_t died_ms;        /* expired: when (closed once its requests are answered) */
    struct zctx *next;      /* in the client's list of expired sessions */
} zctx;

struct lc_zk_client {
    struct event_base *base;
    char *hosts;
    lc_zk_opts o;
    char prefix[LC_NAME_MAX + 2]; /* "/<prefix>" */
    zhandle_t *zh;
    zctx *ctx;
    unsigned gen;
    pthread_mutex_t mu;
    zreq *qhead, *qtail; /* answers for the loop (under mu) */
    int pipefd[2];
    struct event *wake_ev;
    struct event *suspect_timer;
    struct event *bg_timer;
    struct event *reinit_timer;
    zreq *bg; /* background deletes / sweeps waiting for their retry */
    int connected;
    int session_ms;
    /* The session's local validity: ZooKeeper expires a session session_ms after it last heard
     * from it, and it heard from us no earlier than when a request it answered was sent. So the
     * session is alive at least until heard_ms + session_ms (less a drift margin), whatever the
     * loop has or has not been told yet. 0: nothing answered on this session yet. */
    int64_t heard_ms;
    struct event *probe_timer; /* a request every session_ms / 3, so that heard_ms moves on */
    int probing;               /* a probe in flight */
    zctx *dead;                /* expired sessions not closed yet */
    struct event *reap_timer;  /* closes them */
    unsigned long watch_events;
    lc_zk_lock *locks;
    unsigned mark;
    int freeing;
};

struct lc_zk_lock {
    lc_zk_client *c; /* NULL: orphan (client freed) */
    lc_zk_lock *prev, *next;
    char name[LC_NAME_MAX + 1];
    char parent[4 * LC_NAME_MAX + 8]; /* "/<prefix>/<name, percent-encoded>" */
    char token[33];
    unsigned attempt;
    char *node;     /* our node's full path (waiting or holding), or NULL */
    char *watching; /* the predecessor watched in S_WAIT */
    int count;
    int lost;
    uint64_t fence; /* base + czxid */
    int64_t czxid;  /* our node's */
    char owner[48]; /* "<token>-<attempt>": this acquisition's id, sent beside the token */
    lc_zk_lost_fn on_lost;
    void *on_lost_arg;
    /* the operation in flight */
    zop op;
    zstep step;
    zreq *req; /* the request in flight, or NULL */
    lc_zk_fn cb;
    lc_zk_eval_fn eval_cb;
    void *arg;
    int wait_ms;
    int expired;    /* the wait's deadline passed with a request in flight */
    lc_status done; /* a result decided at the call, delivered by defer_ev */
    struct event *deadline_ev, *cap_ev, *defer_ev;
    lc_fenced *zk_eval_slot; /* a fenced eval's answer in flight (anylock_internal.h) */
    unsigned mark;           /* client walks that may call back (walk_next) */
    int eval_release;
    char why[LC_ERRSTR_MAX];
    int freeing;
    zreq *sweep; /* this handle's background sweep (bg_sweep), or NULL */
};

static void step_children(lc_zk_lock *lk);
static void op_fail(lc_zk_lock *lk, lc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void lc_zk_opts_init(lc_zk_opts *opts)
{
    if (!opts)
        return;
    opts->session_timeout_ms = 10000;
    opts->op_timeout_ms = 3000;
    opts->prefix = "lockcore";
}

/* A path component ZooKeeper accepts and that stays one component. */
static int valid_component(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || !strcmp(s, ".") || !strcmp(s, ".."))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '/' || ch < 0x20 || ch == 0x7f)
            return 0;
    }
    return 1;
}

/* Writes name as one path component into out (at least 3 * strlen(name) + 1 bytes): '/', '%',
 * control characters, non-ASCII bytes and a leading '.' percent-encoded, so every lockcore name
 * (inventoryd's "inv:2:{sku/3}:lock") is a node name, and distinct names stay distinct. */
static void encode_component(const char *name, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; name[i]; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch == '/' || ch == '%' || ch < 0x20 || ch >= 0x7f || (i == 0 && ch == '.')) {
            *out++ = '%';
            *out++ = hex[ch >> 4];
            *out++ = hex[ch & 15];
        } else {
            *out++ = (char)ch;
        }
    }
    *out = '\0';
}

static const char *zerr(int rc)
{
    return zerror(rc);
}

/* ---- the hand-over from the library's threads ---- */

static void push(lc_zk_client *c, zreq *r)
{
    pthread_mutex_lock(&c->mu);
    r->next = NULL;
    if (c->qtail)
        c->qtail->next = r;
    else
        c->qhead = r;
    c->qtail = r;
    pthread_mutex_unlock(&c->mu);
    char b = 1;
    ssize_t w = write(c->pipefd[1], &b, 1); /* EAGAIN: a wake-up is already pending */
    (void)w;
}

static void zreq_free(zreq *r)
{
    if (!r)
        return;
    if (r->owner)
        r->owner->sweep = NULL;
    free(r->path);
    free(r->match);
    for (int i = 0; i < r->nkids; i++)
        free(r->kids[i]);
    free(r->kids);
    free(r);
}

/* A completion: the request is answered (push it to the loop). The library drops the
 * completions still pending when a handle is closed, so a handle is closed only once its count
 * is 0 (or after a bound). */
static void answered(zreq *r)
{
    zctx *x = r->x; /* r belongs to the loop once pushed */
    push(r->c, r);
    if (x)
        atomic_fetch_sub(&x->in_library, 1);
}

/* Before a zoo_a* call with r: counted on the current session until answered (counted
 * before the call: its completion may run before the call returns). */
static void presend(zreq *r)
{
    r->sent_ms = lc_now_ms();
    r->x = r->c->ctx;
    if (r->x)
        atomic_fetch_add(&r->x->in_library, 1);
}

/* After the call: rc, and r not counted when the library did not take it. */
static int sent(zreq *r, int rc)
{
    if (rc != ZOK && r->x)
        atomic_fetch_sub(&r->x->in_library, 1);
    return rc;
}

static void on_void_done(int rc, const void *data)
{
    zreq *r = (zreq *)data;
    r->rc = rc;
    answered(r);
}

static void on_stat_done(int rc, const struct Stat *stat, const void *data)
{
    (void)stat;
    on_void_done(rc, data);
}

static void on_create_done(int rc, const char *value, const struct Stat *stat, const void *data)
{
    zreq *r = (zreq *)data;
    r->rc = rc;
    if (rc == ZOK && value) {
        free(r->path);
        r->path = strdup(value);
        r->czxid = stat ? stat->czxid : 0;
        if (!r->path)
            r->rc = ZSYSTEMERROR;
    }
    answered(r);
}

/* Parses a base: NULL or empty data is 0; anything but 1..20 decimal digits in range is bad. */
static int parse_base(const char *v, int len, uint64_t *out)
{
    *out = 0;
    if (!v || len <= 0)
        return 0;
    if (len > 20)
        return -1;
    for (int i = 0; i < len; i++) {
        unsigned d = (unsigned)(v[i] - '0');
        if (d > 9 || *out > (UINT64_MAX - d) / 10)
            return -1;
        *out = *out * 10 + d;
    }
    return 0;
}

static void on_data_done(int rc, const char *value, int value_len, const struct Stat *stat,
                         const void *data)
{
    zreq *r = (zreq *)data;
    r->rc = rc;
    if (rc == ZOK) {
        r->base_bad = parse_base(value, value_len, &r->base) != 0;
        r->version = stat ? stat->version : -1;
    }
    answered(r);
}

static void on_children_done(int rc, const struct String_vector *v, const void *data)
{
    zreq *r = (zreq *)data;
    r->rc = rc;
    if (rc == ZOK && v && v->count > 0) {
        r->kids = calloc((size_t)v->count, sizeof(*r->kids));
        for (int i = 0; r->kids && i < v->count; i++, r->nkids++)
            if (!(r->kids[i] = strdup(v->data[i])))
                break;
        if (!r->kids || r->nkids != v->count)
            r->rc = ZSYSTEMERROR;
    }
    answered(r);
}

static void on_watch(zhandle_t *zh, int type, int state, const char *path, void *wctx)
{
    (void)zh;
    zctx *x = wctx;
    zreq *r = calloc(1, sizeof(*r));
    if (!r)
        return; /* a lost wake-up: the acquire's deadline still ends it */
    r->c = x->c;
    r->gen = x->gen;
    r->kind = Z_WATCH;
    r->type = type;
    r->state = state;
    r->path = path ? strdup(path) : NULL;
    push(x->c, r);
}

/* A new request of kind for lk (NULL: detached) on the current session. */
static zreq *zreq_new(lc_zk_client *c, lc_zk_lock *lk, zkind kind)
{
    zreq *r = calloc(1, sizeof(*r));
    if (r) {
        r->c = c;
        r->lk = lk;
        r->kind = kind;
        r->gen = c->gen;
    }
    return r;
}

/* ---- background deletes (a node of ours nobody will release otherwise) ---- */

static void bg_send(lc_zk_client *c, zreq *r);

static void bg_retry_later(lc_zk_client *c, zreq *r)
{
    r->bg_next = c->bg;
    c->bg = r;
    if (!evtimer_pending(c->bg_timer, NULL))
        lc_async_arm(c->bg_timer, RETRY_MS);
}

static void on_bg_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_client *c = arg;
    zreq *list = c->bg;
    c->bg = NULL;
    while (list) {
        zreq *r = list;
        list = r->bg_next;
        r->bg_next = NULL;
        if (r->gen != c->gen)
            zreq_free(r); /* its session expired: the node went with it */
        else
            bg_send(c, r);
    }
}

static void bg_send(lc_zk_client *c, zreq *r)
{
    if (!c->zh || !c->connected) {
        /* not while disconnected: requests would pile up in the library */
        bg_retry_later(c, r);
        return;
    }
    int rc = ZINVALIDSTATE;
    presend(r);
    if (c->zh && r->kind == Z_BG_DELETE)
        rc = zoo_adelete(c->zh, r->path, -1, on_void_done, r);
    else if (c->zh)
        rc = zoo_aget_children(c->zh, r->path, 0, on_children_done, r);
    if (sent(r, rc) != ZOK)
        bg_retry_later(c, r);
}

/* Deletes path in the background until ZooKeeper answers (or the session ends). */
static void bg_delete(lc_zk_client *c, const char *path)
{
    zreq *r = zreq_new(c, NULL, Z_BG_DELETE);
    if (r && !(r->path = strdup(path))) {
        free(r);
        r = NULL;
    }
    if (r)
        bg_send(c, r);
}

/* Deletes, in the background, the nodes of lk's attempts up to attempt (creates whose answer
 * was lost may have made them). One sweep per handle: a later failure widens the one pending. */
static void bg_sweep(lc_zk_client *c, lc_zk_lock *lk, unsigned attempt)
{
    if (lk->sweep) {
        if (lk->sweep->upto < attempt)
            lk->sweep->upto = attempt;
        return;
    }
    char match[40];
    snprintf(match, sizeof(match), "%s-", lk->token);
    zreq *r = zreq_new(c, NULL, Z_BG_LIST);
    if (r && (!(r->path = strdup(lk->parent)) || !(r->match = strdup(match)))) {
        zreq_free(r);
        r = NULL;
    }
    if (!r)
        return;
    r->upto = attempt;
    r->owner = lk;
    lk->sweep = r;
    bg_send(c, r);
}

/* The attempt number of a node of ours ("<token>-<attempt>-lock-..." after match), or 0. */
static unsigned attempt_of(const char *kid, size_t matchlen)
{
    char *end = NULL;
    unsigned long a = strtoul(kid + matchlen, &end, 10);
    return end && *end == '-' ? (unsigned)a : 0;
}

/* A background request answered. */
static void bg_answer(lc_zk_client *c, zreq *r)
{
    if (r->rc == ZSESSIONEXPIRED || r->rc == ZCLOSING || r->rc == ZNONODE ||
        (r->rc == ZOK && r->kind == Z_BG_DELETE) || c->freeing || r->gen != c->gen) {
        /* done, or the session that owned the node is gone (and the node with it) */
        zreq_free(r);
        return;
    }
    if (r->rc != ZOK) {
        for (int i = 0; i < r->nkids; i++)
            free(r->kids[i]);
        free(r->kids);
        r->kids = NULL;
        r->nkids = 0;
        bg_retry_later(c, r);
        return;
    }
    size_t ml = strlen(r->match);
    for (int i = 0; i < r->nkids; i++)
        if (!strncmp(r->kids[i], r->match, ml) && attempt_of(r->kids[i], ml) > 0 &&
            attempt_of(r->kids[i], ml) <= r->upto) {
            char path[sizeof(((lc_zk_lock *)0)->parent) + 64];
            snprintf(path, sizeof(path), "%s/%s", r->path, r->kids[i]);
            bg_delete(c, path);
        }
    zreq_free(r);
}

/* ---- the token base raised in the background ---- */

static void raise_send(lc_zk_client *c, zreq *r)
{
    if (!c->zh || !c->connected || r->tries-- <= 0) {
        zreq_free(r); /* given up: the next refused commit raises again */
        return;
    }
    char v[24];
    int rc = ZINVALIDSTATE;
    presend(r);
    if (r->kind == Z_RAISE_GET) {
        rc = zoo_aget(c->zh, c->prefix, 0, on_data_done, r);
    } else {
        snprintf(v, sizeof(v), "%" PRIu64, r->want);
        if (r->version < 0) /* no /<prefix>: made with the base */
            rc = zoo_acreate2(c->zh, c->prefix, v, (int)strlen(v), &ZOO_OPEN_ACL_UNSAFE,
                              ZOO_PERSISTENT, on_create_done, r);
        else
            rc = zoo_aset(c->zh, c->prefix, v, (int)strlen(v), r->version, on_stat_done, r);
    }
    if (sent(r, rc) != ZOK)
        zreq_free(r);
}

static void raise_answer(lc_zk_client *c, zreq *r)
{
    if (c->freeing || r->gen != c->gen) {
        zreq_free(r);
        return;
    }
    if (r->kind == Z_RAISE_GET) {
        if (r->rc == ZNONODE)
            r->version = -1;
        else if (r->rc != ZOK || r->base_bad || r->base >= r->want) {
            zreq_free(r); /* done (or not ours to fix: a bad base fails every acquire, said) */
            return;
        }
        r->kind = Z_RAISE_SET;
        raise_send(c, r);
        return;
    }
    if (r->rc == ZBADVERSION || r->rc == ZNODEEXISTS) { /* raced: read again */
        r->kind = Z_RAISE_GET;
        raise_send(c, r);
        return;
    }
    zreq_free(r);
}

lc_status lc_zk_client_raise(lc_zk_client *c, uint64_t seen)
{
    if (!c || seen == 0 || seen > (uint64_t)INT64_MAX)
        return lc_fail(LC_EINVAL, "zookeeper raise: bad argument");
    if (c->freeing)
        return lc_fail(LC_ESTATE, "zookeeper raise: the client is being freed");
    zreq *r = zreq_new(c, NULL, Z_RAISE_GET);
    if (!r)
        return lc_fail(LC_ENOMEM, "zookeeper raise: out of memory");
    r->want = seen;
    r->tries = 8;
    raise_send(c, r);
    return LC_OK;
}

/* ---- operations: ending them ---- */

static void timers_off(lc_zk_lock *lk)
{
    event_del(lk->deadline_ev);
    event_del(lk->cap_ev);
}

/* Ends the operation with st: its callback, last (it may free the handle). */
static void zk_op_finish_reply(lc_zk_lock *lk, lc_status st, const redisReply *reply)
{
    zop op = lk->op;
    lc_zk_fn cb = lk->cb;
    lc_zk_eval_fn eval_cb = lk->eval_cb;
    void *arg = lk->arg;
    lk->op = ZOP_NONE;
    lk->step = S_IDLE;
    lk->cb = NULL;
    lk->eval_cb = NULL;
    lk->arg = NULL;
    lk->expired = 0;
    if (lk->req) {
        lk->req->lk = NULL;
        lk->req = NULL;
    }
    lc_fenced_detach(lk->zk_eval_slot);
    lk->zk_eval_slot = NULL;
    free(lk->watching);
    lk->watching = NULL;
    timers_off(lk);
    event_del(lk->defer_ev);
    if (st == LC_OK)
        lk->why[0] = '\0';
    if (op == ZOP_EVAL) {
        if (eval_cb)
            eval_cb(lk, st, st == LC_OK ? reply : NULL, arg);
    } else if (cb) {
        cb(lk, st, st == LC_OK && op == ZOP_ACQUIRE ? lk->fence : 0, arg);
    }
}

static void zk_op_finish(lc_zk_lock *lk, lc_status st)
{
    zk_op_finish_reply(lk, st, NULL);
}

/* Gives our waiting node up (deleted in the background) and ends the acquire with st. */
static void op_fail(lc_zk_lock *lk, lc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lk->why, sizeof(lk->why), fmt, ap);
    va_end(ap);
    if (lk->op == ZOP_ACQUIRE && lk->count == 0) {
        /* a create still in flight: its answer, detached, deletes the node */
        if (lk->node && lk->c)
            bg_delete(lk->c, lk->node);
        free(lk->node);
        lk->node = NULL;
    }
    zk_op_finish(lk, st);
}

/* ---- acquire ---- */

/* Sends r (made for lk's current step) or fails the operation. */
static void send_or_fail(lc_zk_lock *lk, zreq *r, int rc, const char *what)
{
    if (sent(r, rc) == ZOK) {
        lk->req = r;
        return;
    }
    zreq_free(r);
    op_fail(lk, LC_EIO, "zookeeper lock %.100s: %s not sent: %s", lk->name, what, zerr(rc));
}

static void step_parent(lc_zk_lock *lk, zkind which)
{
    lc_zk_client *c = lk->c;
    lk->step = S_PARENT;
    zreq *r = zreq_new(c, lk, which);
    if (!r) {
        op_fail(lk, LC_ENOMEM, "zookeeper lock %.100s: out of memory", lk->name);
        return;
    }
    const char *path = which == Z_PARENT1 ? c->prefix : lk->parent;
    /* the lock's parent is a container: the server deletes it once empty (Curator does the
     * same); a node made under a parent made again later still gets a larger czxid */
    presend(r);
    int rc = zoo_acreate2(c->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                          which == Z_PARENT1 ? ZOO_PERSISTENT : ZOO_CONTAINER, on_create_done, r);
    send_or_fail(lk, r, rc, "create parent");
}

/* The name prefix of the current attempt's node. */
static void node_prefix(const lc_zk_lock *lk, char *buf, size_t size)
{
    snprintf(buf, size, "%s-%u-", lk->token, lk->attempt);
}

static void step_create(lc_zk_lock *lk)
{
    lc_zk_client *c = lk->c;
    lk->step = S_CREATE;
    char path[sizeof(lk->parent) + 128], pfx[64];
    lk->attempt++;
    node_prefix(lk, pfx, sizeof(pfx));
    snprintf(path, sizeof(path), "%s/%slock-", lk->parent, pfx);
    zreq *r = zreq_new(c, lk, Z_CREATE);
    if (!r) {
        op_fail(lk, LC_ENOMEM, "zookeeper lock %.100s: out of memory", lk->name);
        return;
    }
    presend(r);
    int rc = zoo_acreate2(c->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                          on_create_done, r);
    send_or_fail(lk, r, rc, "create");
}

static void step_children(lc_zk_lock *lk)
{
    lk->step = S_CHILDREN;
    zreq *r = zreq_new(lk->c, lk, Z_CHILDREN);
    if (!r) {
        op_fail(lk, LC_ENOMEM, "zookeeper lock %.100s: out of memory", lk->name);
        return;
    }
    presend(r);
    send_or_fail(lk, r, zoo_aget_children(lk->c->zh, lk->parent, 0, on_children_done, r), "list");
}

/* The sequence number of a node name (its last SEQ_DIGITS characters), -1 if none. */
static long long seq_of(const char *name)
{
    size_t n = strlen(name);
    if (n < SEQ_DIGITS)
        return -1;
    long long v = 0;
    for (size_t i = n - SEQ_DIGITS; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

/* Ours is the lowest node: reads the token base (S_BASE) before the hold counts. */
static void won(lc_zk_lock *lk)
{
    lk->step = S_BASE;
    zreq *r = zreq_new(lk->c, lk, Z_BASE);
    if (!r) {
        op_fail(lk, LC_ENOMEM, "zookeeper lock %.100s: out of memory", lk->name);
        return;
    }
    presend(r);
    send_or_fail(lk, r, zoo_aget(lk->c->zh, lk->c->prefix, 0, on_data_done, r), "get base");
}

/* The base's answer: held with token base + czxid, or given up. */
static void base_answer(lc_zk_lock *lk, zreq *r)
{
    if (r->rc != ZOK) {
        op_fail(lk, LC_EIO, "zookeeper lock %.100s: get base %s: %s", lk->name, lk->c->prefix,
                zerr(r->rc));
        return;
    }
    uint64_t cz = (uint64_t)lk->czxid;
    if (r->base_bad || r->base > UINT64_MAX - cz || r->base + cz > (uint64_t)INT64_MAX) {
        /* refused rather than a token that could go back: an operator must look at it */
        op_fail(lk, LC_EIO,
                "zookeeper lock %.100s: the token base in %s is %s: no token handed out", lk->name,
                lk->c->prefix, r->base_bad ? "not a number" : "too large");
        return;
    }
    lk->fence = r->base + cz;
    snprintf(lk->owner, sizeof(lk->owner), "%s-%u", lk->token, lk->attempt);
    lk->count = 1;
    lk->lost = 0;
    zk_op_finish(lk, LC_OK);
}

/* The queue's answer: hold, give up (try), or watch the predecessor. */
static void after_children(lc_zk_lock *lk, zreq *r)
{
    const char *mine = strrchr(lk->node, '/') + 1;
    long long myseq = seq_of(mine), best = -1;
    int found = 0;
    const char *pred = NULL;
    for (int i = 0; i < r->nkids; i++) {
        long long s = seq_of(r->kids[i]);
        if (!strcmp(r->kids[i], mine))
            found = 1;
        else if (s >= 0 && s < myseq && s > best) {
            best = s;
            pred = r->kids[i];
        }
    }
    if (!found) {
        /* our ephemeral node is gone: the session ended under us */
        free(lk->node);
        lk->node = NULL;
        op_fail(lk, LC_EIO, "zookeeper lock %.100s: our node vanished while waiting (session lost)",
                lk->name);
        return;
    }
    if (!pred) {
        won(lk);
        return;
    }
    if (lk->wait_ms == 0 || lk->expired) {
        op_fail(lk, lk->expired ? LC_ETIMEOUT : LC_EBUSY, "zookeeper lock %.100s: %s (%s is ahead)",
                lk->name, lk->expired ? "not acquired within the wait" : "held by another owner",
                pred);
        return;
    }
    char path[sizeof(lk->parent) + 64 + 256];
    snprintf(path, sizeof(path), "%s/%s", lk->parent, pred);
    free(lk->watching);
    lk->watching = strdup(path);
    zreq *q = lk->watching ? zreq_new(lk->c, lk, Z_EXISTS) : NULL;
    if (!q) {
        op_fail(lk, LC_ENOMEM, "zookeeper lock %.100s: out of memory", lk->name);
        return;
    }
    lk->step = S_EXISTS;
    presend(q);
    send_or_fail(lk, q, zoo_aexists(lk->c->zh, path, 1, on_stat_done, q), "exists");
}

/* An answer to the acquire in flight. */
static void acquire_answer(lc_zk_lock *lk, zreq *r)
{
    lc_zk_client *c = lk->c;
    switch (r->kind) {
    case Z_PARENT1:
    case Z_PARENT2:
        if (r->rc != ZOK && r->rc != ZNODEEXISTS) {
            op_fail(lk, LC_EIO, "zookeeper lock %.100s: create parent: %s", lk->name, zerr(r->rc));
            return;
        }
        if (r->kind == Z_PARENT1)
            step_parent(lk, Z_PARENT2);
        else
            step_create(lk);
        return;
    case Z_CREATE:
        if (r->rc == ZNONODE) {
            step_parent(lk, Z_PARENT1);
            return;
        }
        if (r->rc != ZOK) {
            /* lost on the way back, it may have been created all the same */
            if (r->rc != ZNODEEXISTS && r->rc != ZSESSIONEXPIRED && r->rc != ZCLOSING)
                bg_sweep(c, lk, lk->attempt);
            op_fail(lk, LC_EIO, "zookeeper lock %.100s: create: %s", lk->name, zerr(r->rc));
            return;
        }
        lk->node = r->path;
        r->path = NULL;
        lk->czxid = r->czxid;
        step_children(lk);
        return;
    case Z_CHILDREN:
        if (r->rc != ZOK) {
            op_fail(lk, LC_EIO, "zookeeper lock %.100s: list: %s", lk->name, zerr(r->rc));
            return;
        }
        after_children(lk, r);
        return;
    case Z_BASE: base_answer(lk, r); return;
    case Z_EXISTS:
        if (r->rc == ZNONODE) {
            step_children(lk); /* the predecessor went before the watch was set */
            return;
        }
        if (r->rc != ZOK) {
            op_fail(lk, LC_EIO, "zookeeper lock %.100s: exists: %s", lk->name, zerr(r->rc));
            return;
        }
        if (lk->expired) {
            op_fail(lk, LC_ETIMEOUT, "zookeeper lock %.100s: not acquired within %d ms", lk->name,
                    lk->wait_ms);
            return;
        }
        lk->step = S_WAIT;
        return;
    default: return;
    }
}

static void zk_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_lock *lk = arg;
    if (lk->op != ZOP_ACQUIRE)
        return;
    if (lk->step == S_WAIT) {
        op_fail(lk, LC_ETIMEOUT, "zookeeper lock %.100s: not acquired within %d ms", lk->name,
                lk->wait_ms);
        return;
    }
    lk->expired = 1; /* the answer in flight decides (held, or timed out) */
}

/* The operation's hard cap: ZooKeeper did not answer in time. */
static void on_cap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_lock *lk = arg;
    if (lk->op == ZOP_ACQUIRE) {
        if (lk->step == S_CREATE && lk->c)
            bg_sweep(lk->c, lk, lk->attempt);
        op_fail(lk, LC_EIO, "zookeeper lock %.100s: no answer from ZooKeeper in time", lk->name);
    } else if (lk->op == ZOP_RELEASE) {
        if (lk->node && lk->c)
            bg_delete(lk->c, lk->node);
        free(lk->node);
        lk->node = NULL;
        lk->count = 0;
        lk->fence = 0;
        snprintf(lk->why, sizeof(lk->why),
                 "zookeeper lock %.100s: release not answered in time (node deleted in the "
                 "background)",
                 lk->name);
        zk_op_finish(lk, LC_EIO);
    }
}

static void zk_on_defer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_lock *lk = arg;
    zk_op_finish(lk, lk->done);
}

/* ---- session ---- */

/* A walk over the client's locks that survives callbacks freeing or adding locks: starts a new
 * walk (first = 1) or continues it; the next lock not yet visited, or NULL. */
static lc_zk_lock *walk_next(lc_zk_client *c, int first)
{
    if (first)
        c->mark++;
    for (lc_zk_lock *lk = c->locks; lk; lk = lk->next)
        if (lk->mark != c->mark) {
            lk->mark = c->mark;
            return lk;
        }
    return NULL;
}

/* Every hold of the client is lost; every acquire in flight fails. */
static void session_lost(lc_zk_client *c, const char *why)
{
    for (lc_zk_lock *lk = walk_next(c, 1); lk; lk = walk_next(c, 0)) {
        if (lk->op == ZOP_ACQUIRE && lk->count == 0) {
            op_fail(lk, LC_EIO, "zookeeper lock %.100s: %s while waiting", lk->name, why);
            continue;
        }
        if (lk->count > 0 && !lk->lost) {
            lk->lost = 1;
            snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: lost (%s)", lk->name, why);
            if (lk->node)
                bg_delete(c, lk->node); /* in case the session survived after all */
            if (lk->on_lost)
                lk->on_lost(lk, lk->on_lost_arg);
        }
    }
}

static void on_suspect_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_client *c = arg;
    session_lost(c, "disconnected for a whole session timeout");
}

static lc_status session_start(lc_zk_client *c);

/* Closes the expired sessions whose requests are all answered, or that waited long enough. */
static void reap(lc_zk_client *c, int64_t patience_ms)
{
    int64_t now = lc_now_ms();
    for (zctx **p = &c->dead; *p;) {
        zctx *x = *p;
        if (atomic_load(&x->in_library) > 0 && now - x->died_ms < patience_ms) {
            p = &x->next;
            continue;
        }
        *p = x->next;
        zookeeper_close(x->zh); /* expired: nothing to send, its threads end */
        free(x);
    }
}

static void on_reap_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_client *c = arg;
    reap(c, 2000);
    if (c->dead)
        lc_async_arm(c->reap_timer, 50);
}

static void on_reinit_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_client *c = arg;
    if (session_start(c) != LC_OK)
        lc_async_arm(c->reinit_timer, RETRY_MS);
}

/* The keep-alive of heard_ms: a holder sends nothing to ZooKeeper while it holds (the library's
 * own pings are not seen here), so a cheap request every session_ms / 3 while connected. */
static void on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_zk_client *c = arg;
    if (c->zh && c->connected && !c->probing && !c->freeing) {
        zreq *r = zreq_new(c, NULL, Z_PROBE);
        if (r) {
            presend(r);
            if (sent(r, zoo_aexists(c->zh, "/", 0, on_stat_done, r)) == ZOK)
                c->probing = 1;
            else
                zreq_free(r);
        }
    }
    if (c->session_ms > 0 && !c->freeing)
        lc_async_arm(c->probe_timer, c->session_ms / 3 > 0 ? c->session_ms / 3 : 1);
}

static void session_event(lc_zk_client *c, int state)
{
    if (state == ZOO_CONNECTED_STATE) {
        c->connected = 1;
        c->session_ms = zoo_recv_timeout(c->zh);
        event_del(c->suspect_timer);
        if (!evtimer_pending(c->probe_timer, NULL))
            lc_async_arm(c->probe_timer, 0);
        return;
    }
    if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
        if (c->connected && c->session_ms > 0)
            lc_async_arm(c->suspect_timer, c->session_ms);
        c->connected = 0;
        return;
    }
    if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        c->connected = 0;
        c->heard_ms = 0; /* a new session: nothing heard on it yet */
        c->probing = 0;  /* the old session's probe, if any, is answered there */
        event_del(c->suspect_timer);
        session_lost(c, state == ZOO_EXPIRED_SESSION_STATE ? "session expired"
                                                           : "authentication failed");
        /* a new session now; the expired handle is closed once the library has answered its
         * requests (with ZSESSIONEXPIRED), which it would otherwise drop */
        c->ctx->died_ms = lc_now_ms();
        c->ctx->next = c->dead;
        c->dead = c->ctx;
        c->zh = NULL;
        c->ctx = NULL;
        lc_async_arm(c->reap_timer, 50);
        lc_async_arm(c->reinit_timer, 0);
    }
}

static void on_watch_event(lc_zk_client *c, zreq *r)
{
    if (r->type == ZOO_SESSION_EVENT) {
        session_event(c, r->state);
        return;
    }
    if (!r->path)
        return;
    for (lc_zk_lock *lk = walk_next(c, 1); lk; lk = walk_next(c, 0))
        if (lk->op == ZOP_ACQUIRE && lk->watching && !strcmp(lk->watching, r->path)) {
            c->watch_events++;
            if (lk->step == S_WAIT)
                step_children(lk);
        }
}

/* ---- the loop side of the queue ---- */

/* r's answer came from the server (not a connection loss, a timeout or a closing handle): the
 * server heard from this session at r->sent_ms at the latest. */
static void note_heard(lc_zk_client *c, const zreq *r)
{
    int from_server = r->rc == ZOK || r->rc == ZNONODE || r->rc == ZNODEEXISTS ||
                      r->rc == ZBADVERSION || r->rc == ZNOTEMPTY;
    if (from_server && r->gen == c->gen && r->sent_ms > c->heard_ms)
        c->heard_ms = r->sent_ms;
}

static void dispatch(lc_zk_client *c, zreq *r)
{
    if (r->kind != Z_WATCH)
        note_heard(c, r);
    if (r->kind == Z_PROBE) {
        c->probing = 0;
        zreq_free(r);
        return;
    }
    if (r->kind == Z_WATCH) {
        if (r->gen == c->gen && !c->freeing)
            on_watch_event(c, r);
        zreq_free(r);
        return;
    }
    if (r->kind == Z_BG_DELETE || r->kind == Z_BG_LIST) {
        bg_answer(c, r);
        return;
    }
    if (r->kind == Z_RAISE_GET || r->kind == Z_RAISE_SET) {
        raise_answer(c, r);
        return;
    }
    lc_zk_lock *lk = r->lk;
    if (!lk) {
        /* detached: a node created for nobody is deleted */
        if (r->kind == Z_CREATE && r->rc == ZOK && !c->freeing && r->gen == c->gen)
            bg_delete(c, r->path);
        zreq_free(r);
        return;
    }
    lk->req = NULL;
    if (r->kind == Z_DELETE) {
        int was_lost = lk->lost;
        free(lk->node);
        lk->node = NULL;
        lk->count = 0;
        lk->fence = 0;
        lk->lost = 0;
        lc_status st = LC_OK;
        if (r->rc == ZNONODE || was_lost || r->rc == ZSESSIONEXPIRED) {
            st = LC_ELOST;
            snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: lost before the release",
                     lk->name);
        } else if (r->rc != ZOK) {
            st = LC_EIO;
            snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: release: %s", lk->name,
                     zerr(r->rc));
        }
        zreq_free(r);
        zk_op_finish(lk, st);
        return;
    }
    acquire_answer(lk, r);
    zreq_free(r);
}

static void zk_on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    lc_zk_client *c = arg;
    char buf[256];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    pthread_mutex_lock(&c->mu);
    zreq *list = c->qhead;
    c->qhead = c->qtail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (list) {
        zreq *r = list;
        list = r->next;
        dispatch(c, r);
    }
}

/* ---- client ---- */

static lc_status session_start(lc_zk_client *c)
{
    zctx *x = malloc(sizeof(*x));
    if (!x)
        return LC_ENOMEM;
    c->gen++;
    x->c = c;
    x->gen = c->gen;
    x->died_ms = 0;
    x->next = NULL;
    atomic_init(&x->in_library, 0);
    c->zh = zookeeper_init(c->hosts, on_watch, c->o.session_timeout_ms, NULL, x, 0);
    x->zh = c->zh;
    if (!c->zh) {
        free(x);
        return lc_fail(errno == EINVAL ? LC_EINVAL : LC_EIO,
                       "zookeeper: cannot start a session "
                       "for \"%s\": %s",
                       c->hosts, strerror(errno));
    }
    c->ctx = x;
    return LC_OK;
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/* The library's own log is off (level 0): every reconnect attempt of every session during an
 * election would be a line on stderr; lockcore reports what matters through its results and
 * messages (lc_zk_lock_errmsg). */
static void quiet_library(void)
{
    zoo_set_debug_level((ZooLogLevel)0);
}

lc_status lc_zk_client_new(struct event_base *base, const char *hosts, const lc_zk_opts *opts,
                           lc_zk_client **out)
{
    if (out)
        *out = NULL;
    if (!base || !hosts || !out || !*hosts)
        return lc_fail(LC_EINVAL, "zookeeper client: NULL argument or empty hosts");
    lc_zk_opts o;
    lc_zk_opts_init(&o);
    if (opts)
        o = *opts;
    if (!o.prefix)
        o.prefix = "lockcore";
    if (o.session_timeout_ms <= 0 || o.op_timeout_ms <= 0 ||
        !valid_component(o.prefix, LC_NAME_MAX))
        return lc_fail(LC_EINVAL, "zookeeper client: session_timeout_ms and op_timeout_ms must "
                                  "be > 0, prefix one path component");
    for (const char *p = hosts; *p; p++)
        if (*p == '/' || *p <= ' ')
            return lc_fail(LC_EINVAL,
                           "zookeeper client: hosts must be HOST:PORT[,HOST:PORT...] "
                           "(no chroot, no spaces): \"%s\"",
                           hosts);
    pthread_once(&log_once, quiet_library);
    lc_zk_client *c = calloc(1, sizeof(*c));
    if (!c)
        return lc_fail(LC_ENOMEM, "zookeeper client: out of memory");
    c->pipefd[0] = c->pipefd[1] = -1;
    c->base = base;
    c->o = o;
    snprintf(c->prefix, sizeof(c->prefix), "/%s", o.prefix);
    c->o.prefix = c->prefix + 1;
    pthread_mutex_init(&c->mu, NULL);
    c->hosts = strdup(hosts);
    if (pipe(c->pipefd) == 0) {
        for (int i = 0; i < 2; i++) {
            fcntl(c->pipefd[i], F_SETFL, fcntl(c->pipefd[i], F_GETFL) | O_NONBLOCK);
            fcntl(c->pipefd[i], F_SETFD, FD_CLOEXEC);
        }
        c->wake_ev = event_new(base, c->pipefd[0], EV_READ | EV_PERSIST, zk_on_wake, c);
    }
    c->suspect_timer = evtimer_new(base, on_suspect_timer, c);
    c->bg_timer = evtimer_new(base, on_bg_timer, c);
    c->reinit_timer = evtimer_new(base, on_reinit_timer, c);
    c->reap_timer = evtimer_new(base, on_reap_timer, c);
    c->probe_timer = evtimer_new(base, on_probe_timer, c);
    if (!c->hosts || !c->wake_ev || !c->suspect_timer || !c->bg_timer || !c->reinit_timer ||
        !c->reap_timer || !c->probe_timer || event_add(c->wake_ev, NULL) != 0) {
        lc_zk_client_free(c);
        return lc_fail(LC_ENOMEM, "zookeeper client: out of memory");
    }
    lc_status st = session_start(c);
    if (st != LC_OK) {
        char msg[LC_ERRSTR_MAX];
        snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        lc_zk_client_free(c);
        return lc_fail(st, "%s", msg);
    }
    *out = c;
    return LC_OK;
}

void lc_zk_client_free(lc_zk_client *c)
{
    if (!c || c->freeing)
        return;
    c->freeing = 1;
    while (c->locks) { /* a callback may free any lock: always take the head */
        lc_zk_lock *lk = c->locks;
        c->locks = lk->next;
        if (c->locks)
            c->locks->prev = NULL;
        lk->prev = lk->next = NULL;
        lk->c = NULL;
        if (lk->sweep) {
            lk->sweep->owner = NULL;
            lk->sweep = NULL;
        }
        if (lk->op != ZOP_NONE) {
            snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: client freed", lk->name);
            zk_op_finish(lk, LC_ESTATE);
        }
    }
    c->locks = NULL;
    /* The library drops the completions of requests still unanswered at zookeeper_close (its
     * completion thread is gone by then): give them a moment (the releases just sent) so
     * nothing leaks while the server answers. */
    int patience = c->o.op_timeout_ms < 2000 ? c->o.op_timeout_ms : 2000;
    int64_t until = lc_now_ms() + patience;
    while (c->ctx && c->connected && atomic_load(&c->ctx->in_library) > 0 && lc_now_ms() < until) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    while (c->dead && lc_now_ms() < until) {
        reap(c, patience);
        struct timespec ts = {0, 1000000};
        if (c->dead)
            nanosleep(&ts, NULL);
    }
    reap(c, 0);
    if (c->zh)
        zookeeper_close(c->zh); /* the answered requests are in the queue */
    free(c->ctx);
    pthread_mutex_lock(&c->mu);
    zreq *list = c->qhead;
    c->qhead = c->qtail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (list) {
        zreq *r = list;
        list = r->next;
        zreq_free(r);
    }
    while (c->bg) {
        zreq *r = c->bg;
        c->bg = r->bg_next;
        zreq_free(r);
    }
    if (c->wake_ev)
        event_free(c->wake_ev);
    if (c->suspect_timer)
        event_free(c->suspect_timer);
    if (c->bg_timer)
        event_free(c->bg_timer);
    if (c->reinit_timer)
        event_free(c->reinit_timer);
    if (c->reap_timer)
        event_free(c->reap_timer);
    if (c->probe_timer)
        event_free(c->probe_timer);
    for (int i = 0; i < 2; i++)
        if (c->pipefd[i] >= 0)
            close(c->pipefd[i]);
    pthread_mutex_destroy(&c->mu);
    free(c->hosts);
    free(c);
}

int lc_zk_client_connected(const lc_zk_client *c)
{
    return c ? c->connected : 0;
}

int64_t lc_zk_client_validity_ms(const lc_zk_client *c)
{
    if (!c || !c->connected || c->session_ms <= 0 || c->heard_ms <= 0)
        return 0;
    /* the drift allowance as Redlock's (1 % + 2 ms for the timer granularity) */
    int64_t until = c->heard_ms + c->session_ms - (c->session_ms / 100 + 2);
    int64_t left = until - lc_now_ms();
    return left > 0 ? left : 0;
}

int lc_zk_client_session_timeout_ms(const lc_zk_client *c)
{
    return c ? c->session_ms : 0;
}

unsigned long lc_zk_client_watch_events(const lc_zk_client *c)
{
    return c ? c->watch_events : 0;
}

/* ---- lock handles ---- */

lc_status lc_zk_lock_new(lc_zk_client *c, const char *name, lc_zk_lost_fn on_lost,
                         void *on_lost_arg, lc_zk_lock **out)
{
    if (out)
        *out = NULL;
    if (!c || !name || !out)
        return lc_fail(LC_EINVAL, "zookeeper lock: NULL argument");
    size_t len = strlen(name);
    if (len == 0 || len > LC_NAME_MAX)
        return lc_fail(LC_EINVAL, "zookeeper lock: name must be 1..%d bytes", LC_NAME_MAX);
    if (c->freeing)
        return lc_fail(LC_ESTATE, "zookeeper lock: client being freed");
    lc_zk_lock *lk = calloc(1, sizeof(*lk));
    if (!lk)
        return lc_fail(LC_ENOMEM, "zookeeper lock: out of memory");
    lk->c = c;
    snprintf(lk->name, sizeof(lk->name), "%s", name);
    char enc[3 * LC_NAME_MAX + 1];
    encode_component(name, enc);
    snprintf(lk->parent, sizeof(lk->parent), "%s/%s", c->prefix, enc);
    lc_token_new(lk->token);
    lk->on_lost = on_lost;
    lk->on_lost_arg = on_lost_arg;
    lk->deadline_ev = evtimer_new(c->base, zk_on_deadline, lk);
    lk->cap_ev = evtimer_new(c->base, on_cap, lk);
    lk->defer_ev = evtimer_new(c->base, zk_on_defer, lk);
    if (!lk->deadline_ev || !lk->cap_ev || !lk->defer_ev) {
        lc_zk_lock_free(lk);
        return lc_fail(LC_ENOMEM, "zookeeper lock: out of memory");
    }
    lk->next = c->locks;
    if (lk->next)
        lk->next->prev = lk;
    c->locks = lk;
    *out = lk;
    return LC_OK;
}

void lc_zk_lock_free(lc_zk_lock *lk)
{
    if (!lk || lk->freeing)
        return;
    lk->freeing = 1;
    if (lk->op != ZOP_NONE) {
        snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: handle freed", lk->name);
        zk_op_finish(lk, LC_ESTATE);
    }
    lc_zk_client *c = lk->c;
    if (lk->sweep) { /* it goes on without its handle */
        lk->sweep->owner = NULL;
        lk->sweep = NULL;
    }
    if (c) {
        if (lk->node)
            bg_delete(c, lk->node);
        if (lk->prev)
            lk->prev->next = lk->next;
        else if (c->locks == lk)
            c->locks = lk->next;
        if (lk->next)
            lk->next->prev = lk->prev;
    }
    if (lk->deadline_ev)
        event_free(lk->deadline_ev);
    if (lk->cap_ev)
        event_free(lk->cap_ev);
    if (lk->defer_ev)
        event_free(lk->defer_ev);
    free(lk->node);
    free(lk->watching);
    free(lk);
}

/* The checks common to every operation start: LC_OK with the operation registered. */
static lc_status zk_op_begin(lc_zk_lock *lk, zop op, lc_zk_fn cb, void *arg)
{
    if (!lk)
        return lc_fail(LC_EINVAL, "zookeeper lock: NULL handle");
    if (!lk->c || lk->c->freeing)
        return lc_fail(LC_ESTATE, "zookeeper lock %.100s: client freed", lk->name);
    if (lk->op != ZOP_NONE || lk->freeing)
        return lc_fail(LC_ESTATE, "zookeeper lock %.100s: another operation is in flight",
                       lk->name);
    lk->op = op;
    lk->cb = cb;
    lk->arg = arg;
    lk->expired = 0;
    lk->why[0] = '\0';
    return LC_OK;
}

/* Ends the operation just begun with st from the loop's next turn. */
static void defer(lc_zk_lock *lk, lc_status st)
{
    lk->done = st;
    lc_async_arm(lk->defer_ev, 0);
}

lc_status lc_zk_lock_acquire(lc_zk_lock *lk, int wait_ms, lc_zk_fn cb, void *arg)
{
    if (wait_ms < 0)
        return lc_fail(LC_EINVAL, "zookeeper lock: wait_ms must be >= 0");
    if (lk && lk->count > 0 && lk->lost)
        return lc_fail(LC_ELOST, "zookeeper lock %.100s: lost: release it first", lk->name);
    lc_status st = zk_op_begin(lk, ZOP_ACQUIRE, cb, arg);
    if (st != LC_OK)
        return st;
    lk->wait_ms = wait_ms;
    if (lk->count > 0) {
        lk->count++; /* reentrant: no ZooKeeper call */
        defer(lk, LC_OK);
        return LC_OK;
    }
    if (!lk->c->zh) {
        snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: no session (starting again)",
                 lk->name);
        defer(lk, LC_EIO);
        return LC_OK;
    }
    if (wait_ms > 0)
        lc_async_arm(lk->deadline_ev, wait_ms);
    lc_async_arm(lk->cap_ev, (int64_t)wait_ms + lk->c->o.op_timeout_ms);
    step_create(lk);
    return LC_OK;
}

lc_status lc_zk_lock_release(lc_zk_lock *lk, lc_zk_fn cb, void *arg)
{
    if (lk && lk->count == 0)
        return lc_fail(LC_ENOTHELD, "zookeeper lock %.100s: not held by this owner", lk->name);
    lc_status st = zk_op_begin(lk, ZOP_RELEASE, cb, arg);
    if (st != LC_OK)
        return st;
    if (lk->count > 1) {
        lk->count--;
        defer(lk, LC_OK);
        return LC_OK;
    }
    zreq *r = lk->node && lk->c->zh ? zreq_new(lk->c, lk, Z_DELETE) : NULL;
    if (r)
        presend(r);
    int rc = r ? sent(r, zoo_adelete(lk->c->zh, lk->node, -1, on_void_done, r)) : ZINVALIDSTATE;
    if (rc != ZOK) {
        zreq_free(r);
        /* nothing sent: the node is deleted in the background (or went with the session) */
        if (lk->node)
            bg_delete(lk->c, lk->node);
        int was_lost = lk->lost;
        free(lk->node);
        lk->node = NULL;
        lk->count = 0;
        lk->fence = 0;
        lk->lost = 0;
        snprintf(lk->why, sizeof(lk->why), "zookeeper lock %.100s: %s", lk->name,
                 was_lost ? "lost before the release" : "release not sent (no session)");
        defer(lk, was_lost ? LC_ELOST : LC_EIO);
        return LC_OK;
    }
    lk->step = S_DELETE;
    lk->req = r;
    lc_async_arm(lk->cap_ev, lk->c->o.op_timeout_ms);
    return LC_OK;
}

/* ---- a data-store script fenced by the token ---- */

/* Drops the hold without a callback (LC_EVAL_RELEASE, or a lost hold). */
static void zk_drop_hold(lc_zk_lock *lk)
{
    if (lk->count > 1 && !lk->lost) {
        lk->count--;
        return;
    }
    if (lk->node && lk->c)
        bg_delete(lk->c, lk->node);
    free(lk->node);
    lk->node = NULL;
    lk->count = 0;
    lk->fence = 0;
    lk->lost = 0;
}

static void zk_on_eval_reply(void *owner, const lc_fenced_result *res)
{
    lc_zk_lock *lk = owner;
    lk->zk_eval_slot = NULL;
    lc_fenced_why(lk->why, sizeof(lk->why), "zookeeper lock", lk->name, 100, res, lk->fence);
    if (res->st == LC_ELOST) {
        if (lk->c && res->seen >= lk->fence)
            lc_zk_client_raise(lk->c, res->seen); /* the next holder's token above seen */
        lk->lost = 1;
    }
    if (lk->eval_release)
        zk_drop_hold(lk);
    zk_op_finish_reply(lk, res->st, res->body);
}

lc_status lc_zk_lock_eval(lc_zk_lock *lk, lc_async_client *store, const lc_script *script,
                          const char *seen_key, int flags, int nkeys, const char *const *keys,
                          const size_t *keylens, int nargs, const char *const *args,
                          const size_t *arglens, lc_zk_eval_fn cb, void *arg)
{
    if (!lk || !store || !script || !seen_key || nkeys < 0 || nargs < 0 || (nkeys && !keys) ||
        (nargs && !args) || (flags & ~LC_EVAL_RELEASE))
        return lc_fail(LC_EINVAL, "zookeeper lock eval: bad argument");
    if (lk->count == 0)
        return lc_fail(LC_ENOTHELD, "zookeeper lock %.100s: not held by this owner", lk->name);
    if (lk->lost) {
        if (flags & LC_EVAL_RELEASE)
            zk_drop_hold(lk);
        return lc_fail(LC_ELOST, "zookeeper lock %.100s: lost (session): not sent", lk->name);
    }
    if (!lk->c || !lk->c->connected)
        return lc_fail(LC_EIO,
                       "zookeeper lock %.100s: session suspect (disconnected): not sent, it may "
                       "expire before the script runs",
                       lk->name);
    if (lc_zk_client_validity_ms(lk->c) <= 0) {
        /* ZooKeeper has not answered for a whole session timeout by our own clock (a pause of
         * this process, a loop that did not run): the session may have expired and the lock
         * passed on, whether or not the session event has reached the loop yet. */
        lk->lost = 1;
        snprintf(lk->why, sizeof(lk->why),
                 "zookeeper lock %.100s: lost (no answer from ZooKeeper for a session timeout): "
                 "not sent",
                 lk->name);
        if (lk->node)
            bg_delete(lk->c, lk->node); /* in case the session survived after all */
        if (flags & LC_EVAL_RELEASE)
            zk_drop_hold(lk);
        return lc_fail(LC_ELOST, "%s", lk->why);
    }
    lc_status st = zk_op_begin(lk, ZOP_EVAL, NULL, arg);
    if (st != LC_OK)
        return st;
    lc_fenced *s;
    st = lc_fenced_send(store, script, seen_key, lk->fence, lk->owner, nkeys, keys, keylens, nargs,
                        args, arglens, zk_on_eval_reply, lk, &s);
    if (st != LC_OK) {
        lk->op = ZOP_NONE;
        lk->arg = NULL;
        return st;
    }
    lk->eval_cb = cb;
    lk->zk_eval_slot = s;
    lk->eval_release = flags & LC_EVAL_RELEASE;
    return LC_OK;
}

int lc_zk_lock_held(const lc_zk_lock *lk)
{
    return lk ? lk->count : 0;
}

int lc_zk_lock_lost(const lc_zk_lock *lk)
{
    return lk ? lk->lost : 0;
}

const char *lc_zk_lock_owner(const lc_zk_lock *lk)
{
    return lk && lk->count > 0 ? lk->owner : "";
}

uint64_t lc_zk_lock_fence(const lc_zk_lock *lk)
{
    return lk && lk->count > 0 ? lk->fence : 0;
}

const char *lc_zk_lock_name(const lc_zk_lock *lk)
{
    return lk ? lk->name : "";
}

const char *lc_zk_lock_node(const lc_zk_lock *lk)
{
    return lk && lk->node ? lk->node : "";
}

const char *lc_zk_lock_errmsg(const lc_zk_lock *lk)
{
    return lk ? lk->why : "";
}

/* ---- the anylock backend (lockcore_anylock.h): lc_zk_lock on b->client ---- */

static lc_status zk_any_make(const lc_anylock_backend *b, const char *name,
                             const lc_lock_opts *opts, void **h)
{
    (void)opts; /* the session is the lease (lc_zk_opts.session_timeout_ms) */
    return lc_zk_lock_new(b->client, name, NULL, NULL, (lc_zk_lock **)h);
}

static void zk_any_free(void *h)
{
    lc_zk_lock_free(h);
}

static void on_zk_any_acquired(lc_zk_lock *lk, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_anylock_acquired(arg, st, NULL, lc_zk_lock_errmsg(lk));
}

static lc_status zk_any_acquire(void *h, int wait_ms, int nread, const char *const *reads,
                                lc_anylock *al)
{
    (void)nread; /* token-fenced: lc_anylock reads the keys after the acquire */
    (void)reads;
    return lc_zk_lock_acquire(h, wait_ms, on_zk_any_acquired, al);
}

static void on_zk_any_released(lc_zk_lock *lk, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_anylock_evaluated(arg, st, NULL, lc_zk_lock_errmsg(lk));
}

static lc_status zk_any_release(void *h, lc_anylock *al)
{
    return lc_zk_lock_release(h, on_zk_any_released, al);
}

static void on_zk_any_eval(lc_zk_lock *lk, lc_status st, const redisReply *r, void *arg)
{
    lc_anylock_evaluated(arg, st, r, lc_zk_lock_errmsg(lk));
}

static lc_status zk_any_eval(void *h, lc_async_client *store, const char *seen_key,
                             const lc_script *script, int flags, int nkeys, const char *const *keys,
                             int nargs, const char *const *args, lc_anylock *al)
{
    return lc_zk_lock_eval(h, store, script, seen_key, flags, nkeys, keys, NULL, nargs, args, NULL,
                           on_zk_any_eval, al);
}

/* lc_zk_lock_eval's rules for a commit sent outside the handle's operation. */
static lc_status zk_any_detach_check(const lc_anylock_backend *b, const void *h)
{
    if (!lc_zk_lock_held(h) || lc_zk_lock_lost(h))
        return lc_zk_lock_held(h) ? LC_ELOST : LC_ENOTHELD;
    if (!lc_zk_client_connected(b->client))
        return LC_EIO; /* the session is suspect: nothing is sent */
    if (lc_zk_client_validity_ms(b->client) <= 0)
        return LC_ELOST; /* no answer for a session timeout by our clock */
    return LC_OK;
}

static lc_status zk_any_raise(const lc_anylock_backend *b, const char *name, uint64_t seen)
{
    (void)name; /* one token base for every lock of the client */
    return lc_zk_client_raise(b->client, seen);
}

static int zk_any_held(const void *h)
{
    return lc_zk_lock_held(h);
}

static int zk_any_lost(const void *h)
{
    return lc_zk_lock_lost(h);
}

static uint64_t zk_any_fence(const void *h)
{
    return lc_zk_lock_fence(h);
}

static const char *zk_any_owner(const void *h)
{
    return lc_zk_lock_owner(h);
}

static const char *zk_any_errmsg(const void *h)
{
    return lc_zk_lock_errmsg(h);
}

const lc_anylock_ops lc_anylock_zk = {
    .kind = "zookeeper",
    .token_fenced = 1,
    .closed_with_nodes = 1,
    .make = zk_any_make,
    .free = zk_any_free,
    .acquire = zk_any_acquire,
    .release = zk_any_release,
    .eval = zk_any_eval,
    .detach_check = zk_any_detach_check,
    .raise = zk_any_raise,
    .held = zk_any_held,
    .lost = zk_any_lost,
    .fence = zk_any_fence,
    .owner = zk_any_owner,
    .errmsg = zk_any_errmsg,
};
