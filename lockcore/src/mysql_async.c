/*
 * The MySQL/MariaDB lock backend (lockcore_mysql.h): GET_LOCK on connections driven by
 * libmariadb's non-blocking API on a libevent loop.
 *
 * A connection (mconn) runs one *job* at a time, each a chain of non-blocking steps (connect,
 * query, store each result, next result) whose waits are the socket events libmariadb asks for,
 * under one deadline timer for the whole job; the job's end calls mjob_done, which decides by
 * the job what follows:
 *
 *   J_ACQUIRE  [connect -> CREATE TABLE IF NOT EXISTS once per client ->] the acquire
 *              multi-statement -> held: the connection stays the lock's (socket watched, check
 *              timer armed) | busy/timeout: back to the idle pool | failure: closed
 *   J_CHECK    SELECT IS_USED_LOCK(name) = CONNECTION_ID() -> still ours: watched again (and a
 *              release queued meanwhile starts) | otherwise: lost, closed
 *   J_RELEASE  SELECT RELEASE_LOCK(name) -> back to the idle pool (closed on failure)
 *   J_RAISE    the counter row raised to at least a token the store has seen (a fenced commit
 *              refused: the row went back) -> back to the idle pool; nobody waits for it
 *
 * Ownership: a connection belongs to the client's list from its creation to mconn_close; at any
 * moment it is idle (in the pool), a lock's (lock->conn: acquiring, holding, checking), or
 * releasing (lock->rconn while the release's caller waits for it, or nobody's). Closing a
 * connection is the one way to give up whatever its session holds: the server frees a session's
 * locks when it ends. Every start goes through the loop (a zero timer), so no callback ever runs
 * inside the call that started its operation.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <mysql.h>

#include "anylock_internal.h"
#include "async_internal.h"
#include "base_internal.h"
#include "lockcore/lockcore_mysql.h"

#define GET_LOCK_NAME_MAX 64
#define CREATE_FENCE_TABLE                                                                         \
    "CREATE TABLE IF NOT EXISTS lc_fence (name VARBINARY(512) NOT NULL PRIMARY KEY, "              \
    "token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB"

typedef enum m_phase { P_NONE, P_CONNECT, P_SETUP, P_QUERY, P_STORE, P_NEXT } m_phase;
typedef enum m_job { J_NONE, J_ACQUIRE, J_CHECK, J_RELEASE, J_RAISE } m_job;
typedef enum m_op { MO_NONE, MO_ACQUIRE, MO_RELEASE, MO_EVAL } m_op;

typedef struct mconn mconn;
struct mconn {
    lc_mysql_client *c;
    MYSQL *m;
    struct event *io;    /* the step's socket wait, a zero-delay kick, or the idle/held watch */
    struct event *timer; /* the job's deadline */
    m_phase phase;
    m_job job;
    lc_mysql_lock *lock;                          /* who gets the job's result (NULL: nobody) */
    char *sql;                                    /* the job's statement(s) */
    char *rel_sql;                                /* a release waiting for the check in flight */
    int connected, fresh, reused, release_queued; /* fresh: connected by this job */
    unsigned long id;                             /* CONNECTION_ID() */
    /* the job's result */
    int failed, server_err;
    char err[LC_ERRSTR_MAX];
    long long row[2];
    int nrow;
    mconn *prev, *next; /* every connection of the client */
    mconn *idle_next;   /* in the idle pool */
    int idle;
};

struct lc_mysql_client {
    struct event_base *base;
    lc_mysql_url u;
    lc_mysql_opts o;
    mconn *conns, *idle;
    int nconns, nidle;
    int table_ready;
    int freeing; /* lc_mysql_client_free is running: nothing new starts */
    lc_mysql_lock *locks;
};

struct lc_mysql_lock {
    lc_mysql_client *c; /* NULL: orphan (client freed) */
    char *name;
    size_t namelen;
    char key[GET_LOCK_NAME_MAX + 1]; /* the GET_LOCK name */
    lc_mysql_lost_fn on_lost;
    void *on_lost_arg;
    mconn *conn;  /* acquiring or holding */
    mconn *rconn; /* running this handle's release */
    int count, lost;
    uint64_t fence;
    char owner[33]; /* this acquisition's id, sent beside the token ("" when not held) */
    unsigned long conn_id;
    /* the operation in flight */
    m_op op;
    lc_mysql_lock_fn cb;
    lc_mysql_eval_fn eval_cb;
    void *arg;
    int wait_ms, retried, eval_release;
    int64_t deadline_ms;
    lc_fenced *slot;     /* the fenced eval's answer in flight (anylock_internal.h) */
    struct event *defer; /* starts an acquire, or answers at once, from the loop */
    lc_status defer_st;
    uint64_t defer_fence;
    struct event *check; /* the held lock's ownership check */
    char why[LC_ERRSTR_MAX];
    int freeing;
    lc_mysql_lock *prev, *next;
};

static void step(mconn *mc, int ready);
static char *acquire_sql(const lc_mysql_lock *lk, int64_t *left_out);
static void mjob_done(mconn *mc);

void lc_mysql_opts_init(lc_mysql_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->connect_timeout_ms = 1000;
    o->command_timeout_ms = 1000;
    o->check_ms = 1000;
    o->max_idle = 8;
}

/* ---- connections ---- */

static void mconn_close(mconn *mc)
{
    lc_mysql_client *c = mc->c;
    event_free(mc->io);
    event_free(mc->timer);
    if (mc->m) {
        /* shutdown first: mysql_close then writes its COM_QUIT to a closed socket and returns at
         * once instead of waiting on a server that may not read */
        my_socket fd = mysql_get_socket(mc->m);
        if (mc->connected && fd != MARIADB_INVALID_SOCKET)
            shutdown(fd, SHUT_RDWR);
        mysql_close(mc->m);
    }
    if (mc->idle) {
        for (mconn **p = &c->idle; *p; p = &(*p)->idle_next)
            if (*p == mc) {
                *p = mc->idle_next;
                break;
            }
        c->nidle--;
    }
    if (mc->prev)
        mc->prev->next = mc->next;
    else
        c->conns = mc->next;
    if (mc->next)
        mc->next->prev = mc->prev;
    c->nconns--;
    free(mc->sql);
    free(mc->rel_sql);
    free(mc);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    int ready = 0;
    if (what & EV_READ)
        ready |= MYSQL_WAIT_READ;
    if (what & EV_WRITE)
        ready |= MYSQL_WAIT_WRITE;
    if (what & EV_TIMEOUT)
        ready |= MYSQL_WAIT_TIMEOUT;
    step(arg, ready);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    step(arg, 0);
}

/* Waits for what libmariadb asked (status: MYSQL_WAIT_*), then continues the step. */
static void mconn_wait(mconn *mc, int status)
{
    short what = 0;
    if (status & (MYSQL_WAIT_READ | MYSQL_WAIT_EXCEPT))
        what |= EV_READ;
    if (status & MYSQL_WAIT_WRITE)
        what |= EV_WRITE;
    event_del(mc->io);
    event_assign(mc->io, mc->c->base, mysql_get_socket(mc->m), what, on_io, mc);
    if (status & MYSQL_WAIT_TIMEOUT) {
        unsigned ms = mysql_get_timeout_value_ms(mc->m);
        struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
        event_add(mc->io, &tv);
    } else {
        event_add(mc->io, NULL);
    }
}

/* Ends the job with a failure (the message, and whether the server said it). */
static void mconn_fail(mconn *mc, const char *what)
{
    event_del(mc->io);
    event_del(mc->timer);
    unsigned no = mc->m ? mysql_errno(mc->m) : 0;
    mc->failed = 1;
    mc->server_err = no > 0 && no < 2000; /* ER_* below 2000, the client library's CR_* above */
    snprintf(mc->err, sizeof(mc->err), "%s: %s (%u)", what, mc->m ? mysql_error(mc->m) : "", no);
    mc->phase = P_NONE;
    mjob_done(mc);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mconn *mc = arg;
    event_del(mc->io);
    mc->failed = 1;
    mc->server_err = 0;
    snprintf(mc->err, sizeof(mc->err), "mysql %.100s:%u: no answer in time (%s)", mc->c->u.host,
             mc->c->u.port, mc->phase == P_CONNECT ? "connect" : "statement");
    mc->phase = P_NONE;
    mjob_done(mc);
}

/* Starts the job's work on the next loop turn (phase: P_CONNECT or P_QUERY), its deadline
 * timeout_ms from now. */
static void mconn_kick(mconn *mc, m_phase phase, int64_t timeout_ms)
{
    mc->phase = phase;
    mc->failed = mc->server_err = 0;
    mc->err[0] = '\0';
    mc->nrow = 0;
    mc->row[0] = mc->row[1] = -1;
    event_del(mc->io);
    event_assign(mc->io, mc->c->base, -1, 0, on_kick, mc);
    lc_async_arm(mc->io, 0);
    lc_async_arm(mc->timer, timeout_ms);
}

/* Runs the job's statements: the deadline is the command timeout plus extra_ms. */
static void mconn_query(mconn *mc, int64_t extra_ms)
{
    mconn_kick(mc, mc->connected ? P_QUERY : P_CONNECT,
               (mc->connected ? 0 : mc->c->o.connect_timeout_ms) + mc->c->o.command_timeout_ms +
                   extra_ms);
}

/* Keeps the first row of a result set (two integer columns; NULL as -1). */
static void take_row(mconn *mc, MYSQL_RES *res)
{
    MYSQL_ROW row = mysql_fetch_row(res);
    unsigned n = mysql_num_fields(res);
    if (row) {
        mc->nrow = n < 2 ? (int)n : 2;
        for (int i = 0; i < mc->nrow; i++)
            mc->row[i] = row[i] ? strtoll(row[i], NULL, 10) : -1;
    }
    mysql_free_result(res);
}

/* What one phase's move did: waits on the socket (or failed: mconn_fail ended the job), moved
 * to the next phase (to start at once), or finished the job's statements. */
enum { STEP_WAIT, STEP_NEXT, STEP_DONE };

static int step_connect(mconn *mc, int ready)
{
    int status;
    MYSQL *ret = NULL;
    lc_mysql_client *c = mc->c;
    if (!ready)
        status = mysql_real_connect_start(&ret, mc->m, c->u.host, c->u.user, c->u.password,
                                          c->u.database, c->u.port, NULL, CLIENT_MULTI_STATEMENTS);
    else
        status = mysql_real_connect_cont(&ret, mc->m, ready);
    if (status) {
        mconn_wait(mc, status);
        return STEP_WAIT;
    }
    if (!ret) {
        mconn_fail(mc, "connect");
        return STEP_WAIT;
    }
    mc->connected = 1;
    mc->fresh = 1;
    mc->id = mysql_thread_id(mc->m);
    mc->phase = c->table_ready ? P_QUERY : P_SETUP;
    return STEP_NEXT;
}

static int step_setup(mconn *mc, int ready)
{
    int status, err = 0;
    if (!ready)
        status =
            mysql_real_query_start(&err, mc->m, CREATE_FENCE_TABLE, sizeof(CREATE_FENCE_TABLE) - 1);
    else
        status = mysql_real_query_cont(&err, mc->m, ready);
    if (status) {
        mconn_wait(mc, status);
        return STEP_WAIT;
    }
    /* Without the CREATE privilege the table must exist already: the INSERT will say. */
    if (err) {
        unsigned no = mysql_errno(mc->m);
        if (no != 1142 && no != 1044) { /* ER_TABLEACCESS_DENIED, ER_DBACCESS_DENIED */
            mconn_fail(mc, "create table lc_fence");
            return STEP_WAIT;
        }
    }
    mc->c->table_ready = 1;
    mc->phase = P_QUERY;
    return STEP_NEXT;
}

static int step_query(mconn *mc, int ready)
{
    int status, err = 0;
    if (!ready && mc->job == J_ACQUIRE && mc->lock && mc->fresh) {
        /* connecting took part of the wait: GET_LOCK waits only what is left of it */
        int64_t left;
        char *sql = acquire_sql(mc->lock, &left);
        if (sql) {
            free(mc->sql);
            mc->sql = sql;
        }
    }
    mc->fresh = 0;
    if (!ready)
        status = mysql_real_query_start(&err, mc->m, mc->sql, (unsigned long)strlen(mc->sql));
    else
        status = mysql_real_query_cont(&err, mc->m, ready);
    if (status) {
        mconn_wait(mc, status);
        return STEP_WAIT;
    }
    if (err) {
        mconn_fail(mc, "query");
        return STEP_WAIT;
    }
    mc->phase = P_STORE;
    return STEP_NEXT;
}

static int step_store(mconn *mc, int ready)
{
    int status;
    MYSQL_RES *res = NULL;
    if (!ready)
        status = mysql_store_result_start(&res, mc->m);
    else
        status = mysql_store_result_cont(&res, mc->m, ready);
    if (status) {
        mconn_wait(mc, status);
        return STEP_WAIT;
    }
    if (!res && mysql_field_count(mc->m) > 0) {
        mconn_fail(mc, "result");
        return STEP_WAIT;
    }
    if (res)
        take_row(mc, res);
    if (!mysql_more_results(mc->m))
        return STEP_DONE;
    mc->phase = P_NEXT;
    return STEP_NEXT;
}

static int step_next(mconn *mc, int ready)
{
    int status, err = 0;
    if (!ready)
        status = mysql_next_result_start(&err, mc->m);
    else
        status = mysql_next_result_cont(&err, mc->m, ready);
    if (status) {
        mconn_wait(mc, status);
        return STEP_WAIT;
    }
    if (err > 0) {
        mconn_fail(mc, "statement");
        return STEP_WAIT;
    }
    if (err < 0)
        return STEP_DONE;
    mc->phase = P_STORE;
    return STEP_NEXT;
}

/* One move of the step machine; ready: what the socket wait saw (0 to start a phase). Each
 * phase that completes starts the next at once, until one waits on the socket or the job's
 * statements are done. */
static void step(mconn *mc, int ready)
{
    int r = STEP_NEXT;
    for (; r == STEP_NEXT; ready = 0) {
        switch (mc->phase) {
        case P_CONNECT: r = step_connect(mc, ready); break;
        case P_SETUP: r = step_setup(mc, ready); break;
        case P_QUERY: r = step_query(mc, ready); break;
        case P_STORE: r = step_store(mc, ready); break;
        case P_NEXT: r = step_next(mc, ready); break;
        case P_NONE: return;
        }
    }
    if (r != STEP_DONE)
        return;
    event_del(mc->io);
    event_del(mc->timer);
    mc->phase = P_NONE;
    mjob_done(mc);
}

/* A connection for a job: an idle one, or a new one (connected by the job's first step). */
static mconn *mconn_get(lc_mysql_client *c)
{
    mconn *mc = c->idle;
    if (mc) {
        c->idle = mc->idle_next;
        c->nidle--;
        mc->idle = 0;
        mc->idle_next = NULL;
        mc->reused = 1;
        event_del(mc->io);
        return mc;
    }
    mc = calloc(1, sizeof(*mc));
    if (!mc)
        return NULL;
    mc->c = c;
    mc->m = mysql_init(NULL);
    mc->io = event_new(c->base, -1, 0, on_io, mc);
    mc->timer = evtimer_new(c->base, on_deadline, mc);
    unsigned secs = (unsigned)((c->o.connect_timeout_ms + 999) / 1000);
    my_bool no = 0;
    if (!mc->m || !mc->io || !mc->timer || mysql_options(mc->m, MYSQL_OPT_NONBLOCK, 0) != 0) {
        if (mc->m)
            mysql_close(mc->m);
        if (mc->io)
            event_free(mc->io);
        if (mc->timer)
            event_free(mc->timer);
        free(mc);
        return NULL;
    }
    mysql_options(mc->m, MYSQL_OPT_CONNECT_TIMEOUT, &secs);
    mysql_options(mc->m, MYSQL_OPT_RECONNECT, &no); /* a new session would hold nothing */
    mc->next = c->conns;
    if (c->conns)
        c->conns->prev = mc;
    c->conns = mc;
    c->nconns++;
    return mc;
}

static void on_idle_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mconn_close(arg); /* the server ended the idle session (restart, KILL, wait_timeout) */
}

/* Back to the pool (or closed when the pool is full or the connection failed). */
static void mconn_put(mconn *mc)
{
    lc_mysql_client *c = mc->c;
    free(mc->sql);
    mc->sql = NULL;
    mc->lock = NULL;
    mc->job = J_NONE;
    mc->release_queued = 0;
    if (mc->failed || !mc->connected || c->nidle >= c->o.max_idle) {
        mconn_close(mc);
        return;
    }
    mc->idle = 1;
    mc->idle_next = c->idle;
    c->idle = mc;
    c->nidle++;
    event_del(mc->io);
    event_assign(mc->io, c->base, mysql_get_socket(mc->m), EV_READ, on_idle_read, mc);
    event_add(mc->io, NULL);
}

/* ---- SQL text (user data only as hex literals: nothing to escape) ---- */

static char *hex_put(char *p, const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    *p++ = 'X';
    *p++ = '\'';
    for (size_t i = 0; i < n; i++) {
        *p++ = digits[(unsigned char)s[i] >> 4];
        *p++ = digits[(unsigned char)s[i] & 15];
    }
    *p++ = '\'';
    *p = '\0';
    return p;
}

/* The statement text: fmt with each %K the lock's GET_LOCK name, %N its full name (hex
 * literals), the first %s s1 and the second s2 (text of ours, never user data). */
static char *sql_build(const lc_mysql_lock *lk, const char *fmt, const char *s1, const char *s2)
{
    size_t cap = strlen(fmt) + 4 * (2 * lk->namelen + 4) + 4 * (2 * GET_LOCK_NAME_MAX + 4) +
                 (s1 ? strlen(s1) : 0) + (s2 ? strlen(s2) : 0) + 1;
    const char *s = s1;
    char *out = malloc(cap), *p = out;
    if (!out)
        return NULL;
    for (const char *f = fmt; *f; f++) {
        if (f[0] == '%' && f[1] == 'K') {
            p = hex_put(p, lk->key, strlen(lk->key));
            f++;
        } else if (f[0] == '%' && f[1] == 'N') {
            p = hex_put(p, lk->name, lk->namelen);
            f++;
        } else if (f[0] == '%' && f[1] == 's') {
            size_t n = s ? strlen(s) : 0;
            if (n)
                memcpy(p, s, n);
            p += n;
            s = s2;
            f++;
        } else {
            *p++ = *f;
        }
    }
    *p = '\0';
    return out;
}

/* 64-bit FNV-1a from basis. */
static uint64_t fnv1a(const char *s, size_t n, uint64_t basis)
{
    uint64_t h = basis;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The GET_LOCK name of name (lockcore_mysql.h, "Lock names"). */
static void make_key(const char *name, size_t n, char out[GET_LOCK_NAME_MAX + 1])
{
    int plain = n <= GET_LOCK_NAME_MAX;
    for (size_t i = 0; i < n && plain; i++)
        plain = name[i] >= 0x20 && name[i] < 0x7f;
    if (plain) {
        memcpy(out, name, n);
        out[n] = '\0';
        return;
    }
    size_t pre = n < 31 ? n : 31;
    for (size_t i = 0; i < pre; i++)
        out[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '_';
    snprintf(out + pre, GET_LOCK_NAME_MAX + 1 - pre, "~%016" PRIx64 "%016" PRIx64,
             fnv1a(name, n, 0xcbf29ce484222325ULL), fnv1a(name, n, 0x84222325cbf29ce4ULL));
}

/* ---- operations ---- */

/* Ends the handle's operation: its callback, last (it may free the handle). */
static void mop_finish(lc_mysql_lock *lk, lc_status st, uint64_t fence, const redisReply *reply)
{
    m_op op = lk->op;
    lc_mysql_lock_fn cb = lk->cb;
    lc_mysql_eval_fn ecb = lk->eval_cb;
    void *arg = lk->arg;
    lk->op = MO_NONE;
    lk->cb = NULL;
    lk->eval_cb = NULL;
    lk->arg = NULL;
    if (lk->defer)
        event_del(lk->defer);
    lc_fenced_detach(lk->slot);
    lk->slot = NULL;
    if (st == LC_OK)
        lk->why[0] = '\0';
    if (op == MO_EVAL) {
        if (ecb)
            ecb(lk, st, st == LC_OK ? reply : NULL, arg);
    } else if (cb) {
        cb(lk, st, fence, arg);
    }
}

/* Answers the operation from the loop's next turn. */
static void defer_finish(lc_mysql_lock *lk, lc_status st, uint64_t fence)
{
    lk->defer_st = st;
    lk->defer_fence = fence;
    lc_async_arm(lk->defer, 0);
}

static void on_held_read(evutil_socket_t fd, short what, void *arg);

/* Arms the held lock's watch (its socket) and its next ownership check. */
static void held_watch(lc_mysql_lock *lk)
{
    mconn *mc = lk->conn;
    event_del(mc->io);
    event_assign(mc->io, lk->c->base, mysql_get_socket(mc->m), EV_READ, on_held_read, mc);
    event_add(mc->io, NULL);
    if (lk->c->o.check_ms > 0)
        lc_async_arm(lk->check, lk->c->o.check_ms);
}

/* The held lock is gone: its connection closed, the lock marked lost, on_lost called. */
static void mark_lost(lc_mysql_lock *lk, const char *why)
{
    /* the message first: why may be the connection's own error text, gone with it */
    snprintf(lk->why, sizeof(lk->why), "mysql lock %.60s: lost (%.170s)", lk->name, why);
    mconn *mc = lk->conn;
    lk->conn = NULL;
    if (mc)
        mconn_close(mc);
    event_del(lk->check);
    lk->lost = 1;
    if (lk->on_lost)
        lk->on_lost(lk, lk->on_lost_arg);
}

static void on_held_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mconn *mc = arg;
    mark_lost(mc->lock, "the server closed the session");
}

static void on_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_mysql_lock *lk = arg;
    mconn *mc = lk->conn;
    if (!mc || lk->count == 0 || lk->lost || mc->job != J_NONE)
        return;
    free(mc->sql);
    mc->sql = sql_build(lk, "SELECT IS_USED_LOCK(%K) = CONNECTION_ID(), 0", NULL, NULL);
    if (!mc->sql) {
        lc_async_arm(lk->check, lk->c->o.check_ms);
        return;
    }
    mc->job = J_CHECK;
    mconn_query(mc, 0);
}

/* Starts the release statement (mc->rel_sql) on mc: the handle's hold is already dropped. */
static void release_start(mconn *mc)
{
    free(mc->sql);
    mc->sql = mc->rel_sql;
    mc->rel_sql = NULL;
    mc->job = J_RELEASE;
    if (!mc->sql) {
        mc->failed = 1; /* closed: the server frees the lock with the session */
        mconn_put(mc);
        return;
    }
    mconn_query(mc, 0);
}

/* Drops the hold and gives its connection to a release, answered to lk (or to nobody). */
static void hold_release(lc_mysql_lock *lk, int answer)
{
    mconn *mc = lk->conn;
    lk->conn = NULL;
    lk->count = 0;
    lk->fence = 0;
    lk->conn_id = 0;
    event_del(lk->check);
    mc->lock = answer ? lk : NULL;
    if (answer)
        lk->rconn = mc;
    free(mc->rel_sql);
    mc->rel_sql = sql_build(lk, "SELECT RELEASE_LOCK(%K), 0", NULL, NULL);
    if (mc->job == J_CHECK)
        mc->release_queued = 1; /* one statement at a time: after the check */
    else
        release_start(mc);
}

static void acquire_start(lc_mysql_lock *lk);

/* The acquire's multi-statement ended. */
static void acquire_done(lc_mysql_lock *lk, mconn *mc)
{
    lk->conn = NULL;
    if (mc->failed) {
        int again = mc->reused && !mc->server_err && !lk->retried;
        snprintf(lk->why, sizeof(lk->why), "mysql lock %.60s: %.180s", lk->name, mc->err);
        lc_status st = mc->server_err ? LC_EREDIS : LC_EIO;
        mconn_close(mc); /* whatever the session took is freed with it */
        if (again && (lk->wait_ms == 0 || lc_now_ms() < lk->deadline_ms)) {
            lk->retried = 1; /* a pooled session the server had ended: once more, fresh */
            acquire_start(lk);
            return;
        }
        mop_finish(lk, st, 0, NULL);
        return;
    }
    long long got = mc->row[0], token = mc->row[1];
    if (mc->nrow == 2 && got == 1 && token > 0) {
        lk->conn = mc;
        lk->count = 1;
        lk->lost = 0;
        lk->fence = (uint64_t)token;
        lc_token_new(lk->owner);
        lk->conn_id = mc->id;
        held_watch(lk);
        mop_finish(lk, LC_OK, lk->fence, NULL);
        return;
    }
    if (mc->nrow == 2 && got == 0) {
        mconn_put(mc);
        if (lk->wait_ms > 0) {
            snprintf(lk->why, sizeof(lk->why), "mysql lock %s: not acquired within %d ms", lk->name,
                     lk->wait_ms);
            mop_finish(lk, LC_ETIMEOUT, 0, NULL);
        } else {
            snprintf(lk->why, sizeof(lk->why), "mysql lock %s: held by another session", lk->name);
            mop_finish(lk, LC_EBUSY, 0, NULL);
        }
        return;
    }
    snprintf(lk->why, sizeof(lk->why),
             "mysql lock %s: GET_LOCK answered %lld with token %lld (no fencing token: given up)",
             lk->name, got, token);
    mconn_close(mc);
    mop_finish(lk, LC_EREDIS, 0, NULL);
}

static void mjob_done(mconn *mc)
{
    lc_mysql_lock *lk = mc->lock;
    m_job job = mc->job;
    mc->job = J_NONE;
    if (job == J_ACQUIRE) {
        acquire_done(lk, mc);
    } else if (job == J_CHECK) {
        if (mc->release_queued) { /* the hold was released meanwhile */
            mc->release_queued = 0;
            if (mc->failed) {
                if (lk && lk->rconn == mc) {
                    lk->rconn = NULL;
                    snprintf(lk->why, sizeof(lk->why), "mysql lock %.60s: %.180s", lk->name,
                             mc->err);
                    mconn_close(mc);
                    mop_finish(lk, LC_EIO, 0, NULL);
                    return;
                }
                mconn_close(mc);
                return;
            }
            release_start(mc);
        } else if (mc->failed) {
            mark_lost(lk, mc->err);
        } else if (mc->row[0] != 1) {
            mark_lost(lk, "the session no longer owns the name");
        } else {
            held_watch(lk);
        }
    } else if (job == J_RAISE) {
        mconn_put(mc); /* failed: closed; the next refusal raises again */
    } else if (job == J_RELEASE) {
        lc_status st = mc->failed ? LC_EIO : mc->row[0] == 1 ? LC_OK : LC_ELOST;
        if (lk) {
            lk->rconn = NULL;
            if (st == LC_EIO)
                snprintf(lk->why, sizeof(lk->why), "mysql lock %.60s: %.180s", lk->name, mc->err);
            else if (st == LC_ELOST)
                snprintf(lk->why, sizeof(lk->why),
                         "mysql lock %s: lost before release (the session did not hold it)",
                         lk->name);
        }
        mconn_put(mc);
        if (lk)
            mop_finish(lk, st, 0, NULL);
    }
}

/* Sends the acquire on a connection of the pool (or a new one). */
/* The acquire's statements, GET_LOCK waiting what is left of the wait now (*left, ms). */
static char *acquire_sql(const lc_mysql_lock *lk, int64_t *left_out)
{
    int64_t left = lk->wait_ms > 0 ? lk->deadline_ms - lc_now_ms() : 0;
    if (left < 0)
        left = 0;
    *left_out = left;
    char secs[32], session[64] = "";
    snprintf(secs, sizeof(secs), "%" PRId64 ".%03d", left / 1000, (int)(left % 1000));
    if (lk->c->o.session_timeout_s > 0)
        snprintf(session, sizeof(session), "SET SESSION wait_timeout = %d;",
                 lk->c->o.session_timeout_s);
    return sql_build(lk,
                     "%sSET @lc_got = GET_LOCK(%K, %s);"
                     "INSERT INTO lc_fence(name, token) SELECT %N, LAST_INSERT_ID(1) FROM DUAL"
                     " WHERE @lc_got = 1"
                     " ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1);"
                     "SELECT @lc_got, IF(@lc_got = 1, LAST_INSERT_ID(), 0)",
                     session, secs);
}

static void acquire_start(lc_mysql_lock *lk)
{
    mconn *mc = mconn_get(lk->c);
    int64_t left;
    char *sql = acquire_sql(lk, &left);
    if (!mc || !sql) {
        free(sql);
        if (mc) {
            mc->failed = 1;
            mconn_put(mc);
        }
        snprintf(lk->why, sizeof(lk->why), "mysql lock %s: out of memory", lk->name);
        defer_finish(lk, LC_ENOMEM, 0);
        return;
    }
    free(mc->sql);
    mc->sql = sql;
    mc->lock = lk;
    mc->job = J_ACQUIRE;
    lk->conn = mc;
    mconn_query(mc, left);
}

static void on_defer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_mysql_lock *lk = arg;
    if (lk->op == MO_ACQUIRE && lk->defer_st == LC_OK && lk->count == 0) {
        acquire_start(lk);
        return;
    }
    mop_finish(lk, lk->defer_st, lk->defer_fence, NULL);
}

static lc_status mop_begin(lc_mysql_lock *lk, m_op op, lc_mysql_lock_fn cb, lc_mysql_eval_fn ecb,
                           void *arg)
{
    if (!lk)
        return lc_fail(LC_EINVAL, "mysql lock: NULL handle");
    if (!lk->c || lk->c->freeing || lk->freeing)
        return lc_fail(LC_ESTATE, "mysql lock %s: its client was freed", lk->name);
    if (lk->op != MO_NONE)
        return lc_fail(LC_ESTATE, "mysql lock %s: another operation is in flight", lk->name);
    lk->op = op;
    lk->cb = cb;
    lk->eval_cb = ecb;
    lk->arg = arg;
    lk->why[0] = '\0';
    return LC_OK;
}

lc_status lc_mysql_lock_acquire(lc_mysql_lock *lk, int wait_ms, lc_mysql_lock_fn cb, void *arg)
{
    if (wait_ms < 0)
        return lc_fail(LC_EINVAL, "mysql lock: wait_ms must be >= 0");
    lc_status st = mop_begin(lk, MO_ACQUIRE, cb, NULL, arg);
    if (st != LC_OK)
        return st;
    lk->wait_ms = wait_ms;
    lk->deadline_ms = lc_now_ms() + wait_ms;
    lk->retried = 0;
    if (lk->count > 0 && lk->lost) {
        snprintf(lk->why, sizeof(lk->why), "mysql lock %s: lost (release it first)", lk->name);
        defer_finish(lk, LC_ELOST, 0);
    } else if (lk->count > 0) {
        lk->count++;
        defer_finish(lk, LC_OK, lk->fence);
    } else {
        defer_finish(lk, LC_OK, 0); /* on_defer starts it */
    }
    return LC_OK;
}

lc_status lc_mysql_lock_release(lc_mysql_lock *lk, lc_mysql_lock_fn cb, void *arg)
{
    if (lk && lk->count == 0)
        return lc_fail(LC_ENOTHELD, "mysql lock %s: not held by this owner", lk->name);
    lc_status st = mop_begin(lk, MO_RELEASE, cb, NULL, arg);
    if (st != LC_OK)
        return st;
    if (lk->count > 1) {
        lk->count--;
        defer_finish(lk, LC_OK, 0);
    } else if (lk->lost || !lk->conn) {
        if (lk->conn) {
            /* lost by the store's refusal: the session may still hold the name; closing it
             * frees it (as release_background does) */
            mconn_close(lk->conn);
            lk->conn = NULL;
            event_del(lk->check);
        }
        lk->count = 0;
        lk->lost = 0;
        lk->fence = 0;
        snprintf(lk->why, sizeof(lk->why), "mysql lock %s: lost before release", lk->name);
        defer_finish(lk, LC_ELOST, 0);
    } else {
        hold_release(lk, 1);
    }
    return LC_OK;
}

/* Drops one hold with no answer awaited (after an eval with LC_EVAL_RELEASE). */
static void release_background(lc_mysql_lock *lk)
{
    if (lk->count > 1) {
        lk->count--;
        return;
    }
    if (lk->conn && !lk->lost) {
        hold_release(lk, 0);
        return;
    }
    if (lk->conn) {
        mconn_close(lk->conn);
        lk->conn = NULL;
    }
    event_del(lk->check);
    lk->count = 0;
    lk->lost = 0;
    lk->fence = 0;
    lk->conn_id = 0;
}

static void on_mysql_eval_reply(void *owner, const lc_fenced_result *res)
{
    lc_mysql_lock *lk = owner;
    lk->slot = NULL;
    lc_fenced_why(lk->why, sizeof(lk->why), "mysql lock", lk->name, -1, res, lk->fence);
    if (res->st == LC_ELOST) {
        lk->lost = 1;
        event_del(lk->check);
        if (lk->c && res->seen >= lk->fence)
            lc_mysql_client_raise(lk->c, lk->name, res->seen);
    }
    if (lk->eval_release)
        release_background(lk);
    mop_finish(lk, res->st, 0, res->body);
}

lc_status lc_mysql_lock_eval(lc_mysql_lock *lk, lc_async_client *store, const lc_script *script,
                             const char *seen_key, int flags, int nkeys, const char *const *keys,
                             const size_t *keylens, int nargs, const char *const *args,
                             const size_t *arglens, lc_mysql_eval_fn cb, void *arg)
{
    if (!lk || !store || !script || !seen_key || nkeys < 0 || nargs < 0 || (nkeys && !keys) ||
        (nargs && !args) || (flags & ~LC_EVAL_RELEASE))
        return lc_fail(LC_EINVAL, "mysql lock eval: bad argument");
    if (lk->count == 0)
        return lc_fail(LC_ENOTHELD, "mysql lock %s: not held by this owner", lk->name);
    if (lk->op != MO_NONE || lk->freeing || !lk->c || lk->c->freeing)
        return lc_fail(LC_ESTATE, "mysql lock %s: another operation is in flight", lk->name);
    if (lk->lost) {
        snprintf(lk->why, sizeof(lk->why), "mysql lock %s: lost before the eval: not sent",
                 lk->name);
        if (flags & LC_EVAL_RELEASE)
            release_background(lk);
        return lc_fail(LC_ELOST, "%s", lk->why);
    }
    lc_fenced *s;
    lc_status st = lc_fenced_send(store, script, seen_key, lk->fence, lk->owner, nkeys, keys,
                                  keylens, nargs, args, arglens, on_mysql_eval_reply, lk, &s);
    if (st != LC_OK)
        return st;
    mop_begin(lk, MO_EVAL, NULL, cb, arg);
    lk->slot = s;
    lk->eval_release = flags & LC_EVAL_RELEASE;
    return LC_OK;
}

lc_status lc_mysql_client_raise(lc_mysql_client *c, const char *name, uint64_t seen)
{
    size_t n = name ? strlen(name) : 0;
    if (!c || n == 0 || n > LC_NAME_MAX || seen == 0 || seen > (uint64_t)INT64_MAX)
        return lc_fail(LC_EINVAL, "mysql raise: bad argument");
    if (c->freeing)
        return lc_fail(LC_ESTATE, "mysql raise: the client is being freed");
    /* INSERT as well as UPDATE: a row gone with the server that had it (an emptied lc_fence)
     * must come back above seen too, or the acquire would start it again at 1 */
    static const char head[] = "INSERT INTO lc_fence(name, token) VALUES (";
    static const char tail[] = ") ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))";
    char *sql = malloc(sizeof(head) + 2 * n + 3 + 24 + sizeof(tail));
    mconn *mc = sql ? mconn_get(c) : NULL;
    if (!mc) {
        free(sql);
        return lc_fail(LC_ENOMEM, "mysql raise: out of memory");
    }
    char *p = sql + sizeof(head) - 1;
    memcpy(sql, head, sizeof(head) - 1);
    p = hex_put(p, name, n);
    p += sprintf(p, ", %" PRIu64 "%s", seen, tail);
    free(mc->sql);
    mc->sql = sql;
    mc->lock = NULL;
    mc->job = J_RAISE;
    mconn_query(mc, 0);
    return LC_OK;
}

const char *lc_mysql_lock_owner(const lc_mysql_lock *lk)
{
    return lk && lk->count > 0 ? lk->owner : "";
}

/* ---- handles ---- */

lc_status lc_mysql_lock_new(lc_mysql_client *c, const char *name, lc_mysql_lost_fn on_lost,
                            void *on_lost_arg, lc_mysql_lock **out)
{
    if (out)
        *out = NULL;
    if (!c || !name || !out)
        return lc_fail(LC_EINVAL, "mysql lock: NULL argument");
    size_t n = strlen(name);
    if (n == 0 || n > LC_NAME_MAX)
        return lc_fail(LC_EINVAL, "mysql lock: name must be 1..%d bytes", LC_NAME_MAX);
    lc_mysql_lock *lk = calloc(1, sizeof(*lk));
    if (!lk)
        return lc_fail(LC_ENOMEM, "mysql lock: out of memory");
    lk->c = c;
    lk->name = strdup(name);
    lk->namelen = n;
    lk->on_lost = on_lost;
    lk->on_lost_arg = on_lost_arg;
    lk->defer = evtimer_new(c->base, on_defer, lk);
    lk->check = evtimer_new(c->base, on_check, lk);
    if (!lk->name || !lk->defer || !lk->check) {
        lc_mysql_lock_free(lk);
        return lc_fail(LC_ENOMEM, "mysql lock: out of memory");
    }
    make_key(name, n, lk->key);
    lk->next = c->locks;
    if (c->locks)
        c->locks->prev = lk;
    c->locks = lk;
    *out = lk;
    return LC_OK;
}

/* Cuts the handle loose from its client: operation ended (LC_ESTATE), connections given up. */
static void lock_detach(lc_mysql_lock *lk)
{
    if (lk->conn) {
        mconn_close(lk->conn); /* the server frees the hold, or stops the wait, with the session */
        lk->conn = NULL;
    }
    if (lk->rconn) {
        lk->rconn->lock = NULL;
        lk->rconn = NULL;
    }
    if (lk->check)
        event_del(lk->check);
    if (lk->defer)
        event_del(lk->defer);
    if (lk->op != MO_NONE) {
        snprintf(lk->why, sizeof(lk->why), "mysql lock %s: handle or client freed", lk->name);
        mop_finish(lk, LC_ESTATE, 0, NULL); /* last: the callback may free the handle */
    }
}

void lc_mysql_lock_free(lc_mysql_lock *lk)
{
    if (!lk || lk->freeing)
        return;
    lk->freeing = 1;
    lc_mysql_client *c = lk->c;
    if (c) {
        lock_detach(lk);
        if (lk->prev)
            lk->prev->next = lk->next;
        else if (c->locks == lk)
            c->locks = lk->next;
        if (lk->next)
            lk->next->prev = lk->prev;
    }
    if (lk->defer)
        event_free(lk->defer);
    if (lk->check)
        event_free(lk->check);
    free(lk->name);
    free(lk);
}

/* ---- client ---- */

lc_status lc_mysql_client_new(struct event_base *base, const char *url, const lc_mysql_opts *opts,
                              lc_mysql_client **out)
{
    if (out)
        *out = NULL;
    if (!base || !url || !out)
        return lc_fail(LC_EINVAL, "mysql client: NULL argument");
    lc_mysql_opts o;
    lc_mysql_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.connect_timeout_ms <= 0 || o.command_timeout_ms <= 0 || o.check_ms < 0 ||
        o.max_idle < 0 || o.session_timeout_s < 0 || o.session_timeout_s > 31536000)
        return lc_fail(LC_EINVAL, "mysql client: timeouts must be > 0, check_ms, max_idle and "
                                  "session_timeout_s >= 0");
    if (o.session_timeout_s > 0 && (o.check_ms == 0 || o.check_ms >= o.session_timeout_s * 1000))
        return lc_fail(LC_EINVAL, "mysql client: check_ms must be in 1..session_timeout_s * 1000 "
                                  "(a live holder's session must never be idle that long)");
    lc_mysql_url u;
    char why[128];
    if (lc_mysql_url_parse(url, &u, why, sizeof(why)) != LC_OK)
        return lc_fail(LC_EINVAL, "mysql client: %s", why);
    lc_mysql_client *c = calloc(1, sizeof(*c));
    if (!c)
        return lc_fail(LC_ENOMEM, "mysql client: out of memory");
    c->base = base;
    c->u = u;
    c->o = o;
    *out = c;
    return LC_OK;
}

void lc_mysql_client_free(lc_mysql_client *c)
{
    if (!c)
        return;
    c->freeing = 1;
    while (c->locks) {
        lc_mysql_lock *lk = c->locks;
        c->locks = lk->next;
        if (c->locks)
            c->locks->prev = NULL;
        lk->prev = lk->next = NULL;
        lk->c = NULL;    /* an orphan before its callback: freeing it there is plain */
        lock_detach(lk); /* may free lk (its callback) */
    }
    while (c->conns)
        mconn_close(c->conns);
    free(c);
}

int lc_mysql_client_conns(const lc_mysql_client *c)
{
    return c ? c->nconns : 0;
}

int lc_mysql_lock_held(const lc_mysql_lock *lk)
{
    return lk ? lk->count : 0;
}

int lc_mysql_lock_lost(const lc_mysql_lock *lk)
{
    return lk ? lk->lost : 0;
}

uint64_t lc_mysql_lock_fence(const lc_mysql_lock *lk)
{
    return lk ? lk->fence : 0;
}

const char *lc_mysql_lock_name(const lc_mysql_lock *lk)
{
    return lk ? lk->name : "";
}

unsigned long lc_mysql_lock_conn_id(const lc_mysql_lock *lk)
{
    return lk ? lk->conn_id : 0;
}

const char *lc_mysql_lock_errmsg(const lc_mysql_lock *lk)
{
    return lk ? lk->why : "";
}

/* ---- the anylock backend (lockcore_anylock.h): lc_mysql_lock on b->client ---- */

static lc_status my_any_make(const lc_anylock_backend *b, const char *name,
                             const lc_lock_opts *opts, void **h)
{
    (void)opts; /* no lease: the session is the hold (session_timeout_s, check_ms) */
    return lc_mysql_lock_new(b->client, name, NULL, NULL, (lc_mysql_lock **)h);
}

static void my_any_free(void *h)
{
    lc_mysql_lock_free(h);
}

static void on_my_any_acquired(lc_mysql_lock *lk, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_anylock_acquired(arg, st, NULL, lc_mysql_lock_errmsg(lk));
}

static lc_status my_any_acquire(void *h, int wait_ms, int nread, const char *const *reads,
                                lc_anylock *al)
{
    (void)nread; /* token-fenced: lc_anylock reads the keys after the acquire */
    (void)reads;
    return lc_mysql_lock_acquire(h, wait_ms, on_my_any_acquired, al);
}

static void on_my_any_released(lc_mysql_lock *lk, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_anylock_evaluated(arg, st, NULL, lc_mysql_lock_errmsg(lk));
}

static lc_status my_any_release(void *h, lc_anylock *al)
{
    return lc_mysql_lock_release(h, on_my_any_released, al);
}

static void on_my_any_eval(lc_mysql_lock *lk, lc_status st, const redisReply *r, void *arg)
{
    lc_anylock_evaluated(arg, st, r, lc_mysql_lock_errmsg(lk));
}

static lc_status my_any_eval(void *h, lc_async_client *store, const char *seen_key,
                             const lc_script *script, int flags, int nkeys, const char *const *keys,
                             int nargs, const char *const *args, lc_anylock *al)
{
    return lc_mysql_lock_eval(h, store, script, seen_key, flags, nkeys, keys, NULL, nargs, args,
                              NULL, on_my_any_eval, al);
}

static lc_status my_any_detach_check(const lc_anylock_backend *b, const void *h)
{
    (void)b;
    return lc_mysql_lock_held(h) ? LC_OK : LC_ENOTHELD;
}

static lc_status my_any_raise(const lc_anylock_backend *b, const char *name, uint64_t seen)
{
    return lc_mysql_client_raise(b->client, name, seen);
}

static int my_any_held(const void *h)
{
    return lc_mysql_lock_held(h);
}

static int my_any_lost(const void *h)
{
    return lc_mysql_lock_lost(h);
}

static uint64_t my_any_fence(const void *h)
{
    return lc_mysql_lock_fence(h);
}

static const char *my_any_owner(const void *h)
{
    return lc_mysql_lock_owner(h);
}

static const char *my_any_errmsg(const void *h)
{
    return lc_mysql_lock_errmsg(h);
}

const lc_anylock_ops lc_anylock_mysql = {
    .kind = "mysql",
    .token_fenced = 1,
    .make = my_any_make,
    .free = my_any_free,
    .acquire = my_any_acquire,
    .release = my_any_release,
    .eval = my_any_eval,
    .detach_check = my_any_detach_check,
    .raise = my_any_raise,
    .held = my_any_held,
    .lost = my_any_lost,
    .fence = my_any_fence,
    .owner = my_any_owner,
    .errmsg = my_any_errmsg,
};
