/*
 * Integration tests of the MySQL/MariaDB lock backend (mysql_async.c, lockcore_mysql.h) against a
 * real mariadbd (mariadb_fixture.h) and a redis-server as the data store (gf_redis), on libevent
 * loops driven by the test thread: mutual exclusion judged as the store saw it (forked holders
 * doing read-modify-write on a Redis counter under the lock, fenced, no lost update, tokens in
 * the store's order strictly increasing), reentrancy, a waiter timing out at its deadline, a
 * holder whose connection is KILLed or whose server is killed -9 told through on_lost and its
 * fenced write refused by the store, tokens growing across a server restart, a killed holder
 * process freeing the lock, and an acquire whose counter fails holding nothing.
 */
#include <inttypes.h>

#include "lt_loop.h"

#include <event2/event.h>

#include "lockcore/lockcore_mysql.h"
#include "mariadb_fixture.h"
#include "slowproxy.h"

static mdb_server *db;
static lc_async_client *store;
static lc_mysql_client *mc;

static const char WRITE_BODY[] = "redis.call('SET', KEYS[1], ARGV[1])\n"
                                 "redis.call('RPUSH', KEYS[2], lc_fence)\n"
                                 "return lc_fence\n";

static int group_setup(void **state)
{
    (void)state;
    if (!mdb_available()) {
        fprintf(stderr, "it_mysql: mariadbd not installed, skipping\n");
        return 0;
    }
    db = mdb_start();
    return db && gf_start(NULL, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    mdb_stop(db);
    db = NULL;
    return gf_group_teardown(state);
}

static lc_mysql_opts test_opts(void)
{
    lc_mysql_opts o;
    lc_mysql_opts_init(&o);
    o.check_ms = 300;
    return o;
}

static int setup(void **state)
{
    (void)state;
    if (!db)
        return 0;
    lc_mysql_opts o = test_opts();
    if (lt_loop_start() != 0 || rf_flushall(gf_redis) != 0 ||
        lc_async_client_new(lt_base, rf_url(gf_redis), NULL, &store) != LC_OK ||
        lc_mysql_client_new(lt_base, mdb_url(db), &o, &mc) != LC_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lc_mysql_client_free(mc);
    lc_async_client_free(store);
    mc = NULL;
    store = NULL;
    if (lt_base)
        lt_loop_stop();
    return 0;
}

#define NEED_DB()                                                                                  \
    do {                                                                                           \
        if (!db)                                                                                   \
            skip();                                                                                \
    } while (0)

typedef struct result {
    int calls;
    lc_status st;
    uint64_t fence;
} result;

static int done(void *arg)
{
    return ((result *)arg)->calls > 0;
}

static void on_result(lc_mysql_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    result *r = arg;
    r->calls++;
    r->st = st;
    r->fence = fence;
}

static int lost_calls;
static void on_lost(lc_mysql_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    lost_calls++;
}

static int lost_seen(void *arg)
{
    return lc_mysql_lock_lost(arg);
}

static lc_mysql_lock *mlock(lc_mysql_client *c, const char *name)
{
    lc_mysql_lock *l = NULL;
    assert_ok(lc_mysql_lock_new(c, name, on_lost, NULL, &l));
    return l;
}

/* Starts an acquire (its callback never from inside the call) and runs base until it answers. */
static result acquire_on(struct event_base *base, lc_mysql_lock *l, int wait_ms)
{
    result r = {0};
    assert_ok(lc_mysql_lock_acquire(l, wait_ms, on_result, &r));
    assert_int_equal(r.calls, 0);
    int64_t deadline = tu_now_ms() + wait_ms + 10000;
    while (!r.calls && tu_now_ms() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(r.calls, 1);
    return r;
}

static result acquire(lc_mysql_lock *l, int wait_ms)
{
    return acquire_on(lt_base, l, wait_ms);
}

static result release(lc_mysql_lock *l)
{
    result r = {0};
    assert_ok(lc_mysql_lock_release(l, on_result, &r));
    assert_int_equal(r.calls, 0);
    assert_true(lt_run_until(done, &r, 10000));
    return r;
}

typedef struct eresult {
    int calls;
    lc_status st;
    long long value;
} eresult;

static void on_eval(lc_mysql_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    eresult *r = arg;
    r->calls++;
    r->st = st;
    r->value = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
}

/* The fenced write of v to "mq:value" (and the token to list "mq:tokens"), run on base. */
static lc_status write_on(struct event_base *base, lc_async_client *st, lc_mysql_lock *l,
                          const lc_script *s, int flags, const char *v, eresult *r)
{
    const char *keys[2] = {"mq:value", "mq:tokens"};
    const char *args[1] = {v};
    memset(r, 0, sizeof(*r));
    lc_status rc =
        lc_mysql_lock_eval(l, st, s, "mq:seen", flags, 2, keys, NULL, 1, args, NULL, on_eval, r);
    if (rc == LC_OK) {
        assert_int_equal(r->calls, 0);
        int64_t deadline = tu_now_ms() + 10000;
        while (!r->calls && tu_now_ms() < deadline)
            event_base_loop(base, EVLOOP_ONCE);
        assert_int_equal(r->calls, 1);
    }
    return rc;
}

static long long db_free_lock(const char *name)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT IS_FREE_LOCK('%s')", name);
    return mdb_scalar(db, sql);
}

/* 1 once the server says name is free (a closed session's locks go when the server has seen the
 * close: a few ms), within 3 s. */
static int wait_free(const char *name)
{
    int64_t deadline = tu_now_ms() + 3000;
    while (db_free_lock(name) != 1 && tu_now_ms() < deadline)
        tu_sleep_ms(10);
    return db_free_lock(name) == 1;
}

/* Try, reentrancy, release order, tokens per name, a long name, and the pool's connections. */
static void test_basic(void **state)
{
    (void)state;
    NEED_DB();
    lc_mysql_lock *a = mlock(mc, "mq:basic"), *b = mlock(mc, "mq:basic");
    result r = acquire(a, 0);
    assert_int_equal(r.st, LC_OK);
    uint64_t t1 = r.fence;
    assert_true(t1 > 0);
    assert_int_equal(db_free_lock("mq:basic"), 0);
    assert_int_equal(acquire(b, 0).st, LC_EBUSY);
    r = acquire(a, 0); /* re-entered: same token, no server call */
    assert_int_equal(r.st, LC_OK);
    assert_int_equal(r.fence, t1);
    assert_int_equal(lc_mysql_lock_held(a), 2);
    assert_int_equal(release(a).st, LC_OK);
    assert_int_equal(lc_mysql_lock_held(a), 1);
    assert_int_equal(acquire(b, 0).st, LC_EBUSY);
    assert_int_equal(release(a).st, LC_OK);
    assert_int_equal(lc_mysql_lock_held(a), 0);
    assert_status(lc_mysql_lock_release(a, on_result, NULL), LC_ENOTHELD);
    r = acquire(b, 0);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > t1);
    assert_int_equal(release(b).st, LC_OK);
    assert_int_equal(db_free_lock("mq:basic"), 1);
    /* one at a time per handle */
    result r1 = {0};
    assert_ok(lc_mysql_lock_acquire(a, 0, on_result, &r1));
    assert_status(lc_mysql_lock_acquire(a, 0, on_result, &r1), LC_ESTATE);
    assert_true(lt_run_until(done, &r1, 5000));
    assert_int_equal(release(a).st, LC_OK);

    /* A name longer than GET_LOCK's 64 characters: hashed, still exclusive, its own counter. */
    char longname[301];
    memset(longname, 'n', 300);
    longname[300] = '\0';
    lc_mysql_lock *la = mlock(mc, longname), *lb = mlock(mc, longname);
    assert_int_equal(acquire(la, 0).st, LC_OK);
    assert_int_equal(acquire(lb, 0).st, LC_EBUSY);
    assert_int_equal(release(la).st, LC_OK);
    r = acquire(lb, 0);
    assert_int_equal(r.st, LC_OK);
    assert_int_equal(r.fence, 2);
    assert_int_equal(release(lb).st, LC_OK);
    assert_int_equal(mdb_scalar(db, "SELECT MAX(LENGTH(name)) FROM lc_fence"), 300);

    /* What an uncontended acquire + release costs (printed, not judged: a shared machine). */
    int64_t t0 = tu_now_ms();
    enum { ROUNDS_TIMED = 200 };
    for (int i = 0; i < ROUNDS_TIMED; i++) {
        assert_int_equal(acquire(a, 0).st, LC_OK);
        assert_int_equal(release(a).st, LC_OK);
    }
    fprintf(stderr, "it_mysql: acquire + release, %d rounds: %.3f ms each\n", ROUNDS_TIMED,
            (double)(tu_now_ms() - t0) / ROUNDS_TIMED);

    /* Holders and waiters have a connection each; idle ones are reused. */
    assert_true(lc_mysql_client_conns(mc) >= 1 && lc_mysql_client_conns(mc) <= 2);
    lc_mysql_lock_free(la);
    lc_mysql_lock_free(lb);
    lc_mysql_lock_free(a);
    lc_mysql_lock_free(b);
}

/* A waiter times out at its deadline; the holder keeps the lock; bad input is refused. */
static void test_waiter_timeout(void **state)
{
    (void)state;
    NEED_DB();
    lc_mysql_lock *a = mlock(mc, "mq:wait"), *b = mlock(mc, "mq:wait");
    assert_int_equal(acquire(a, 0).st, LC_OK);
    int64_t t0 = tu_now_ms();
    result r = acquire(b, 700);
    int64_t took = tu_now_ms() - t0;
    assert_int_equal(r.st, LC_ETIMEOUT);
    assert_between(took, 650, 2500);
    assert_int_equal(lc_mysql_lock_held(a), 1);
    assert_int_equal(lc_mysql_lock_lost(a), 0);
    /* a waiter gets it once the holder lets go */
    result w = {0};
    assert_ok(lc_mysql_lock_acquire(b, 5000, on_result, &w));
    lt_run_until(lt_never, NULL, 200);
    assert_int_equal(w.calls, 0);
    assert_int_equal(release(a).st, LC_OK);
    assert_true(lt_run_until(done, &w, 5000));
    assert_int_equal(w.st, LC_OK);
    /* bad input: nothing starts */
    assert_status(lc_mysql_lock_acquire(b, -1, on_result, &w), LC_EINVAL);
    lc_mysql_lock *bad = NULL;
    assert_status(lc_mysql_lock_new(mc, "", NULL, NULL, &bad), LC_EINVAL);
    assert_null(bad);
    lc_mysql_client *c2 = NULL;
    assert_status(lc_mysql_client_new(lt_base, "redis://x", NULL, &c2), LC_EINVAL);
    assert_null(c2);
    /* a handle freed while it waits: LC_ESTATE from inside the free, the wait given up */
    lc_mysql_lock *c = mlock(mc, "mq:wait");
    result rc = {0};
    assert_ok(lc_mysql_lock_acquire(c, 5000, on_result, &rc));
    lt_run_until(lt_never, NULL, 100);
    lc_mysql_lock_free(c);
    assert_int_equal(rc.calls, 1);
    assert_int_equal(rc.st, LC_ESTATE);
    assert_int_equal(release(b).st, LC_OK);
    assert_true(wait_free("mq:wait")); /* c's session (granted it, maybe) has ended on the server */
    lc_mysql_lock_free(a);
    lc_mysql_lock_free(b);
}

static void on_result_free(lc_mysql_lock *l, lc_status st, uint64_t fence, void *arg)
{
    on_result(l, st, fence, arg);
    lc_mysql_lock_free(l); /* as seglock does with a handle whose acquire failed */
}

/* The client freed under its locks: a waiter's acquire ends with LC_ESTATE from inside the free
 * (and its callback may free its handle there), a holder becomes an orphan whose calls answer
 * LC_ESTATE, and the server frees what the closed sessions held. */
static void test_client_free(void **state)
{
    (void)state;
    NEED_DB();
    lc_mysql_lock *h = mlock(mc, "mq:cfree"), *w = mlock(mc, "mq:cfree");
    assert_int_equal(acquire(h, 0).st, LC_OK);
    result r = {0};
    assert_ok(lc_mysql_lock_acquire(w, 5000, on_result_free, &r));
    lt_run_until(lt_never, NULL, 100);
    assert_int_equal(r.calls, 0);
    lc_mysql_client_free(mc);
    mc = NULL;
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.st, LC_ESTATE);
    result r2 = {0};
    assert_status(lc_mysql_lock_acquire(h, 0, on_result, &r2), LC_ESTATE);
    assert_status(lc_mysql_lock_release(h, on_result, &r2), LC_ESTATE);
    lc_mysql_lock_free(h);
    assert_true(wait_free("mq:cfree"));
}

/* A waiter whose connection is slow to open (250 ms each way: the handshake takes over a second)
 * still answers at its deadline: GET_LOCK waits only what is left of the wait once connected. */
static void test_wait_counts_connect(void **state)
{
    (void)state;
    NEED_DB();
    sp_proxy *p = sp_start(mdb_port(db));
    assert_non_null(p);
    int port = atoi(strrchr(sp_url(p), ':') + 1);
    char url[128];
    snprintf(url, sizeof url, "mysql://" MDB_USER ":" MDB_PASSWORD "@127.0.0.1:%d/" MDB_DATABASE,
             port);
    lc_mysql_opts o = test_opts();
    o.connect_timeout_ms = 5000;
    lc_mysql_client *slow = NULL;
    assert_ok(lc_mysql_client_new(lt_base, url, &o, &slow));
    lc_mysql_lock *h = mlock(mc, "mq:slowwait"), *w = mlock(slow, "mq:slowwait");
    assert_int_equal(acquire(h, 0).st, LC_OK);
    sp_set_delay_ms(p, 250);
    int64_t t0 = tu_now_ms();
    result r = acquire(w, 2500);
    int64_t took = tu_now_ms() - t0;
    fprintf(stderr, "it_mysql: a 2500 ms wait through a 250 ms proxy answered in %lld ms\n",
            (long long)took);
    assert_int_equal(r.st, LC_ETIMEOUT);
    /* the deadline, plus the last round trip (500 ms) and scheduling; not the connect's 1.2 s */
    assert_between(took, 2400, 3600);
    assert_int_equal(release(h).st, LC_OK);
    lc_mysql_lock_free(w);
    lc_mysql_lock_free(h);
    lc_mysql_client_free(slow);
    sp_stop(p);
}

/* ---- mutual exclusion as the store saw it ---- */

enum { HOLDERS = 3, ROUNDS = 25 };

typedef struct child_ctx {
    int calls;
    lc_status st;
    char value[32];
} child_ctx;

static void on_get(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    child_ctx *c = arg;
    c->calls++;
    c->st = st;
    snprintf(c->value, sizeof c->value, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "0");
}

/* A forked holder: ROUNDS times take the lock, read the counter with a plain GET, then write
 * read + 1 fenced, releasing with the write. Exits 0, or the failed check's line. */
static void holder_child(const char *db_url, const char *redis_url)
{
    struct event_base *base = event_base_new();
    lc_async_client *st = NULL;
    lc_mysql_client *c = NULL;
    lc_mysql_lock *l = NULL;
    lc_script *s = NULL;
    LT_CHILD_CHECK(base && lc_async_client_new(base, redis_url, NULL, &st) == LC_OK);
    LT_CHILD_CHECK(lc_mysql_client_new(base, db_url, NULL, &c) == LC_OK);
    LT_CHILD_CHECK(lc_mysql_lock_new(c, "mq:mutex", NULL, NULL, &l) == LC_OK);
    LT_CHILD_CHECK(lc_token_fenced_script_new(WRITE_BODY, &s) == LC_OK);
    for (int i = 0; i < ROUNDS; i++) {
        result r = {0};
        LT_CHILD_CHECK(lc_mysql_lock_acquire(l, 20000, on_result, &r) == LC_OK);
        while (!r.calls)
            event_base_loop(base, EVLOOP_ONCE);
        LT_CHILD_CHECK(r.st == LC_OK);
        child_ctx g = {0};
        const char *argv[] = {"GET", "mq:value"};
        LT_CHILD_CHECK(lc_async_command(st, 2, argv, NULL, on_get, &g) == LC_OK);
        while (!g.calls)
            event_base_loop(base, EVLOOP_ONCE);
        LT_CHILD_CHECK(g.st == LC_OK);
        char next[32];
        snprintf(next, sizeof next, "%lld", atoll(g.value) + 1);
        const char *keys[2] = {"mq:value", "mq:tokens"};
        const char *args[1] = {next};
        eresult e = {0};
        LT_CHILD_CHECK(lc_mysql_lock_eval(l, st, s, "mq:seen", LC_EVAL_RELEASE, 2, keys, NULL, 1,
                                          args, NULL, on_eval, &e) == LC_OK);
        while (!e.calls)
            event_base_loop(base, EVLOOP_ONCE);
        LT_CHILD_CHECK(e.st == LC_OK);
    }
    lc_mysql_lock_free(l);
    lc_mysql_client_free(c);
    lc_async_client_free(st);
    lc_script_free(s);
    event_base_free(base);
    _exit(0);
}

static void test_mutual_exclusion(void **state)
{
    (void)state;
    NEED_DB();
    pid_t kids[HOLDERS];
    for (int i = 0; i < HOLDERS; i++) {
        kids[i] = lt_fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0)
            holder_child(mdb_url(db), rf_url(gf_redis));
    }
    for (int i = 0; i < HOLDERS; i++)
        assert_int_equal(lt_wait_child(kids[i], 40000), 0);
    char buf[32];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET mq:value"), 1);
    assert_int_equal(atoll(buf), HOLDERS * ROUNDS); /* no lost update */
    /* the tokens in the order the store applied the writes: strictly increasing */
    long long prev = 0;
    for (int i = 0; i < HOLDERS * ROUNDS; i++) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "LINDEX mq:tokens %d", i);
        assert_int_equal(rf_string(gf_redis, buf, sizeof buf, cmd), 1);
        assert_true(atoll(buf) > prev);
        prev = atoll(buf);
    }
}

/* ---- losses ---- */

/* KILL of the holder's connection: on_lost at once; a stale holder that has not noticed yet
 * (its loop not run) has its fenced write refused once the next holder has written. */
static void test_kill_connection(void **state)
{
    (void)state;
    NEED_DB();
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new(WRITE_BODY, &s));
    lost_calls = 0;
    lc_mysql_opts o = test_opts();
    o.check_ms = 0; /* the socket alone tells */
    lc_mysql_client *c1 = NULL;
    assert_ok(lc_mysql_client_new(lt_base, mdb_url(db), &o, &c1));
    lc_mysql_lock *a = mlock(c1, "mq:kill");
    result r = acquire(a, 0);
    assert_int_equal(r.st, LC_OK);
    eresult e;
    assert_ok(write_on(lt_base, store, a, s, 0, "a1", &e));
    assert_int_equal(e.st, LC_OK);
    char sql[64];
    snprintf(sql, sizeof sql, "KILL %lu", lc_mysql_lock_conn_id(a));
    assert_int_equal(mdb_exec(db, sql), 0);
    int64_t t0 = tu_now_ms();
    assert_true(lt_run_until(lost_seen, a, 5000));
    assert_int_equal(lost_calls, 1);
    assert_true(tu_now_ms() - t0 < 1000);       /* the socket, not the periodic check */
    assert_int_equal(lc_mysql_lock_held(a), 1); /* until released */
    assert_status(write_on(lt_base, store, a, s, 0, "a2", &e), LC_ELOST); /* not sent */
    assert_int_equal(release(a).st, LC_ELOST);
    assert_int_equal(lc_mysql_lock_held(a), 0);

    /* The stale holder on a loop of its own that does not run while B takes the lock. */
    struct event_base *base2 = event_base_new();
    assert_non_null(base2);
    lc_mysql_client *c2 = NULL;
    lc_async_client *store2 = NULL;
    assert_ok(lc_mysql_client_new(base2, mdb_url(db), NULL, &c2));
    assert_ok(lc_async_client_new(base2, rf_url(gf_redis), NULL, &store2));
    lc_mysql_lock *stale = mlock(c2, "mq:kill");
    /* waits: the server frees a KILLed connection's named lock when that thread ends, which a
     * loaded machine may delay (a try-lock met it still held, LC_EBUSY, in a clean-clone CI run) */
    r = acquire_on(base2, stale, 5000);
    assert_int_equal(r.st, LC_OK);
    uint64_t ts = r.fence;
    snprintf(sql, sizeof sql, "KILL %lu", lc_mysql_lock_conn_id(stale));
    assert_int_equal(mdb_exec(db, sql), 0);
    lc_mysql_lock *b = mlock(mc, "mq:kill");
    r = acquire(b, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > ts);
    assert_ok(write_on(lt_base, store, b, s, 0, "b1", &e));
    assert_int_equal(e.st, LC_OK);
    assert_int_equal(lc_mysql_lock_lost(stale), 0); /* has not noticed */
    assert_ok(write_on(base2, store2, stale, s, 0, "stale", &e));
    assert_int_equal(e.st, LC_ELOST); /* the store refused it */
    assert_int_equal(lc_mysql_lock_lost(stale), 1);
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET mq:value"), 1);
    assert_string_equal(buf, "b1");
    assert_int_equal(release(b).st, LC_OK);
    lc_mysql_lock_free(stale);
    lc_mysql_client_free(c2);
    lc_async_client_free(store2);
    event_base_free(base2);
    lc_mysql_lock_free(a);
    lc_mysql_lock_free(b);
    lc_mysql_client_free(c1);
    lc_script_free(s);
}

/* The server stops answering (SIGSTOP: no close, no error on the socket): the periodic check
 * finds the holder lost by its command timeout. */
static void test_server_paused(void **state)
{
    (void)state;
    NEED_DB();
    lc_mysql_opts o = test_opts();
    o.check_ms = 200;
    o.command_timeout_ms = 500;
    lc_mysql_client *c1 = NULL;
    assert_ok(lc_mysql_client_new(lt_base, mdb_url(db), &o, &c1));
    lost_calls = 0;
    lc_mysql_lock *a = mlock(c1, "mq:pause");
    assert_int_equal(acquire(a, 0).st, LC_OK);
    lt_run_until(lt_never, NULL, 500); /* checks pass while the server answers */
    assert_int_equal(lc_mysql_lock_lost(a), 0);
    assert_int_equal(kill(mdb_pid(db), SIGSTOP), 0);
    int64_t t0 = tu_now_ms();
    int lost = lt_run_until(lost_seen, a, 5000);
    int64_t took = tu_now_ms() - t0;
    kill(mdb_pid(db), SIGCONT);
    assert_true(lost);
    assert_int_equal(lost_calls, 1);
    assert_between(took, 400, 2500); /* within check_ms + command timeout, with margin */
    assert_non_null(strstr(lc_mysql_lock_errmsg(a), "no answer in time"));
    assert_int_equal(release(a).st, LC_ELOST);
    assert_true(wait_free("mq:pause"));
    lc_mysql_lock_free(a);
    lc_mysql_client_free(c1);
}

/* A holder that stops running (its loop not run, as a SIGSTOPped process) keeps the lock only
 * until the server ends its silent session (session_timeout_s): then the next holder gets it,
 * and the paused holder's late fenced write is refused by the store. */
static void test_paused_holder_session_timeout(void **state)
{
    (void)state;
    NEED_DB();
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new(WRITE_BODY, &s));
    struct event_base *base2 = event_base_new();
    assert_non_null(base2);
    lc_mysql_opts o = test_opts();
    o.session_timeout_s = 1;
    lc_mysql_client *c2 = NULL;
    assert_status(lc_mysql_client_new(base2, mdb_url(db),
                                      &(lc_mysql_opts){.connect_timeout_ms = 1,
                                                       .command_timeout_ms = 1,
                                                       .check_ms = 1000,
                                                       .session_timeout_s = 1},
                                      &c2),
                  LC_EINVAL); /* a live holder would be idle as long as the timeout */
    lc_async_client *store2 = NULL;
    assert_ok(lc_mysql_client_new(base2, mdb_url(db), &o, &c2));
    assert_ok(lc_async_client_new(base2, rf_url(gf_redis), NULL, &store2));
    lc_mysql_lock *paused = mlock(c2, "mq:paused");
    result r = acquire_on(base2, paused, 0);
    assert_int_equal(r.st, LC_OK);
    uint64_t tp = r.fence;
    /* live: its checks keep the session busier than the timeout */
    lc_mysql_lock *b = mlock(mc, "mq:paused");
    int64_t until = tu_now_ms() + 1800;
    while (tu_now_ms() < until)
        event_base_loop(base2, EVLOOP_NONBLOCK);
    assert_int_equal(lc_mysql_lock_lost(paused), 0);
    assert_int_equal(acquire(b, 0).st, LC_EBUSY);
    /* paused: base2 no longer runs */
    int64_t t0 = tu_now_ms();
    r = acquire(b, 8000);
    int64_t took = tu_now_ms() - t0;
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > tp);
    assert_between(took, 500, 4000);
    eresult e;
    assert_ok(write_on(lt_base, store, b, s, 0, "b", &e));
    assert_int_equal(e.st, LC_OK);
    assert_int_equal(lc_mysql_lock_lost(paused), 0); /* wakes up unaware */
    assert_ok(write_on(base2, store2, paused, s, 0, "late", &e));
    assert_int_equal(e.st, LC_ELOST);
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET mq:value"), 1);
    assert_string_equal(buf, "b");
    assert_int_equal(release(b).st, LC_OK);
    lc_mysql_lock_free(paused);
    lc_mysql_lock_free(b);
    lc_mysql_client_free(c2);
    lc_async_client_free(store2);
    event_base_free(base2);
    lc_script_free(s);
}

/* A holder process killed -9: the server drops its session and a waiter gets the lock. */
static void test_holder_process_killed(void **state)
{
    (void)state;
    NEED_DB();
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t kid = lt_fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        struct event_base *base = event_base_new();
        lc_mysql_client *c = NULL;
        lc_mysql_lock *l = NULL;
        LT_CHILD_CHECK(lc_mysql_client_new(base, mdb_url(db), NULL, &c) == LC_OK);
        LT_CHILD_CHECK(lc_mysql_lock_new(c, "mq:proc", NULL, NULL, &l) == LC_OK);
        result r = {0};
        LT_CHILD_CHECK(lc_mysql_lock_acquire(l, 0, on_result, &r) == LC_OK);
        while (!r.calls)
            event_base_loop(base, EVLOOP_ONCE);
        LT_CHILD_CHECK(r.st == LC_OK);
        LT_CHILD_CHECK(write(p[1], "k", 1) == 1);
        for (;;)
            pause();
    }
    close(p[1]);
    char ch;
    assert_int_equal(read(p[0], &ch, 1), 1);
    close(p[0]);
    lc_mysql_lock *w = mlock(mc, "mq:proc");
    assert_int_equal(acquire(w, 0).st, LC_EBUSY);
    kill(kid, SIGKILL);
    lt_wait_child(kid, 5000);
    int64_t t0 = tu_now_ms();
    result r = acquire(w, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_true(tu_now_ms() - t0 < 2000);
    assert_int_equal(release(w).st, LC_OK);
    lc_mysql_lock_free(w);
}

/* The server killed -9 under a holder: lost at once; restarted: tokens keep growing (the counter
 * row persisted); a pooled session the server ended is replaced without a failure. */
static void test_server_restart(void **state)
{
    (void)state;
    NEED_DB();
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new(WRITE_BODY, &s));
    lc_mysql_lock *a = mlock(mc, "mq:restart"), *idle = mlock(mc, "mq:other");
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) { /* a few tokens, and a session left idle in the pool */
        result r = acquire(idle, 0);
        assert_int_equal(r.st, LC_OK);
        assert_int_equal(release(idle).st, LC_OK);
        r = acquire(a, 0);
        assert_int_equal(r.st, LC_OK);
        assert_true(r.fence > last);
        last = r.fence;
        if (i < 2)
            assert_int_equal(release(a).st, LC_OK);
    }
    lost_calls = 0;
    assert_int_equal(mdb_halt(db, SIGKILL), 0);
    assert_true(lt_run_until(lost_seen, a, 5000));
    assert_int_equal(lost_calls, 1);
    eresult e;
    assert_status(write_on(lt_base, store, a, s, 0, "a", &e), LC_ELOST);
    result r = acquire(idle, 0); /* server down: no answer, nothing held */
    assert_true(r.st == LC_EIO);
    assert_int_equal(lc_mysql_lock_held(idle), 0);
    assert_int_equal(mdb_restart(db), 0);
    lc_mysql_lock *b = mlock(mc, "mq:restart");
    r = acquire(b, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > last);
    assert_int_equal(release(b).st, LC_OK);
    assert_int_equal(release(a).st, LC_ELOST);
    lc_mysql_lock_free(a);
    lc_mysql_lock_free(b);
    lc_mysql_lock_free(idle);
    lc_script_free(s);
}

/* GET_LOCK succeeds but the counter cannot be written: the acquire fails and holds nothing. */
static void test_counter_fails(void **state)
{
    (void)state;
    NEED_DB();
    lc_mysql_lock *a = mlock(mc, "mq:nocounter");
    assert_int_equal(acquire(a, 0).st, LC_OK); /* the table exists */
    assert_int_equal(release(a).st, LC_OK);
    assert_int_equal(
        mdb_exec(db, "ALTER TABLE " MDB_DATABASE ".lc_fence ADD COLUMN x INT NOT NULL"), 0);
    result r = acquire(a, 0);
    int ok = mdb_exec(db, "ALTER TABLE " MDB_DATABASE ".lc_fence DROP COLUMN x");
    assert_int_equal(r.st, LC_EREDIS);
    assert_int_equal(ok, 0);
    assert_int_equal(lc_mysql_lock_held(a), 0);
    assert_non_null(strstr(lc_mysql_lock_errmsg(a), "default value"));
    assert_true(wait_free("mq:nocounter")); /* the closed session's lock, freed by the server */
    assert_int_equal(acquire(a, 0).st, LC_OK);
    assert_int_equal(release(a).st, LC_OK);
    lc_mysql_lock_free(a);
}

static uint64_t row_want;
/* 1 once lc_fence's row of "mq:back" is at least row_want (the background raise landed). */
static int row_raised(void *arg)
{
    (void)arg;
    long long v =
        mdb_scalar(db, "SELECT token FROM " MDB_DATABASE ".lc_fence WHERE name = 'mq:back'");
    return v >= 0 && (uint64_t)v >= row_want;
}

/* Issue 29 item 9: the counter row set back (lc_fence restored from a backup, a failover to a
 * replica behind) under a store that has seen its tokens. The stale holder S (on a loop of its
 * own that does not run: paused) wrote with token ts, and its session is gone (KILL, as a
 * failover ends it); the row is set back to ts - 1, so the next holder B gets ts itself:
 *   - B's commit with the equal token is refused (another acquisition; before: accepted as the
 *     same hold, and S's late commit with ts would be accepted beside it);
 *   - the refusal raised the row to the seen token: B's next acquire is above it and accepted;
 *   - the seen token of a ZooKeeper ensemble (2^33 + 5, far above the row) is passed the same
 *     way at the next refusal, not in 2^33 acquires;
 *   - S's commit, sent when it wakes, is refused by the store.
 * About 1 s. */
static void test_row_set_back(void **state)
{
    (void)state;
    NEED_DB();
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new(WRITE_BODY, &s));
    struct event_base *base2 = event_base_new();
    assert_non_null(base2);
    lc_mysql_client *c2 = NULL;
    lc_async_client *store2 = NULL;
    assert_ok(lc_mysql_client_new(base2, mdb_url(db), NULL, &c2));
    assert_ok(lc_async_client_new(base2, rf_url(gf_redis), NULL, &store2));
    lc_mysql_lock *stale = mlock(c2, "mq:back");
    result r = acquire_on(base2, stale, 0);
    assert_int_equal(r.st, LC_OK);
    uint64_t ts = r.fence;
    eresult e;
    assert_ok(write_on(base2, store2, stale, s, 0, "s1", &e));
    assert_int_equal(e.st, LC_OK);
    char sql[160];
    snprintf(sql, sizeof sql, "KILL %lu", lc_mysql_lock_conn_id(stale));
    assert_int_equal(mdb_exec(db, sql), 0);
    snprintf(sql, sizeof sql,
             "UPDATE " MDB_DATABASE ".lc_fence SET token = %" PRIu64 " WHERE name = 'mq:back'",
             ts - 1);
    assert_int_equal(mdb_exec(db, sql), 0);

    lc_mysql_lock *b = mlock(mc, "mq:back");
    r = acquire(b, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence == ts); /* the source went back: the very token S wrote with */
    assert_ok(write_on(lt_base, store, b, s, 0, "b-equal", &e));
    fprintf(stderr, "it_mysql: a second holder with the seen token %" PRIu64 ": %s\n", ts,
            lc_status_name(e.st));
    assert_int_equal(e.st, LC_ELOST);
    assert_int_equal(release(b).st, LC_ELOST);
    row_want = ts;
    assert_true(lt_run_until(row_raised, NULL, 5000));
    r = acquire(b, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > ts);
    assert_ok(write_on(lt_base, store, b, s, 0, "b1", &e));
    assert_int_equal(e.st, LC_OK);
    assert_int_equal(release(b).st, LC_OK);

    /* a ZooKeeper ensemble's token as the seen one (a switch of kinds) */
    const uint64_t epoch2 = (2ULL << 32) | 5;
    redisReply *set = rf_command(gf_redis, "SET mq:seen %" PRIu64, epoch2);
    assert_non_null(set);
    freeReplyObject(set);
    r = acquire(b, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_ok(write_on(lt_base, store, b, s, 0, "b-below", &e));
    assert_int_equal(e.st, LC_ELOST);
    assert_int_equal(release(b).st, LC_ELOST);
    row_want = epoch2;
    assert_true(lt_run_until(row_raised, NULL, 5000));
    r = acquire(b, 5000);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > epoch2);
    assert_ok(write_on(lt_base, store, b, s, 0, "b2", &e));
    assert_int_equal(e.st, LC_OK);

    /* S wakes: its commit goes out and the store refuses it */
    assert_int_equal(lc_mysql_lock_lost(stale), 0); /* has not noticed */
    assert_ok(write_on(base2, store2, stale, s, 0, "stale", &e));
    assert_int_equal(e.st, LC_ELOST);
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET mq:value"), 1);
    assert_string_equal(buf, "b2");
    assert_int_equal(release(b).st, LC_OK);
    lc_mysql_lock_free(stale);
    lc_mysql_client_free(c2);
    lc_async_client_free(store2);
    event_base_free(base2);
    lc_mysql_lock_free(b);
    lc_script_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiter_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_free, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_counts_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mutual_exclusion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_paused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused_holder_session_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holder_process_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counter_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_row_set_back, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
