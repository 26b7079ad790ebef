/*
 * The ZooKeeper lock (lockcore_zk.h) against a real one-node ZooKeeper and a real Redis as the
 * data store, both started by the group setup on free ports: mutual exclusion as the store saw
 * it, fencing tokens across holders, fairness, no herd, the wait deadline, reentrancy, a lost
 * session, a holder killed with SIGKILL, and a paused holder whose commit the store refuses; an
 * ensemble rebuilt under a store that has seen the old one's tokens (issue 29 item 9).
 *
 * The holders of the last two are child processes (this binary run again with --zk-child), so
 * that killing or pausing one pauses its ZooKeeper session too.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>

#define THREADED /* the synchronous calls of libzookeeper-mt */
#include <zookeeper/zookeeper.h>

#include "lc_test.h"
#include "lockcore/lockcore_zk.h"
#include "lt_loop.h"
#include "proc_registry.h"
#include "zk_fixture.h"

static zf_ensemble *zk;
static rf_server *redis;

enum { SESSION_MS = 1000 };

/* A fenced increment: KEYS counter, tokens; ARGV the value read before. -1: lost update. */
static const char INCR_BODY[] = "local v = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
                                "if v ~= tonumber(ARGV[1]) then return -1 end\n"
                                "redis.call('SET', KEYS[1], v + 1)\n"
                                "redis.call('RPUSH', KEYS[2], lc_fence)\n"
                                "return v + 1\n";
static const char SET_BODY[] = "redis.call('SET', KEYS[1], ARGV[1]) return 1\n";

static lc_zk_client *zk_client(int session_ms)
{
    lc_zk_opts o;
    lc_zk_opts_init(&o);
    o.session_timeout_ms = session_ms;
    o.op_timeout_ms = 3000;
    o.prefix = "lctest";
    lc_zk_client *c = NULL;
    lc_status st = lc_zk_client_new(lt_base, zf_hosts(zk), &o, &c);
    if (st != LC_OK)
        fail_msg("lc_zk_client_new: %s (%s)", lc_status_name(st), lc_errmsg());
    return c;
}

static int connected(void *arg)
{
    return lc_zk_client_connected(arg);
}

static int disconnected(void *arg)
{
    return !lc_zk_client_connected(arg);
}

static lc_zk_lock *zk_lock(lc_zk_client *c, const char *name, lc_zk_lost_fn on_lost, void *arg)
{
    lc_zk_lock *l = NULL;
    assert_ok(lc_zk_lock_new(c, name, on_lost, arg, &l));
    return l;
}

/* The result of one operation. */
typedef struct res {
    int done;
    lc_status st;
    uint64_t fence;
    long long value; /* eval: the body's integer */
    int64_t at_ms;
} res;

static int is_done(void *arg)
{
    return ((res *)arg)->done;
}

static void on_res(lc_zk_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    res *r = arg;
    r->done++;
    r->st = st;
    r->fence = fence;
    r->at_ms = tu_now_ms();
}

static void on_eval_res(lc_zk_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    res *r = arg;
    r->done++;
    r->st = st;
    r->value = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -999;
    r->at_ms = tu_now_ms();
}

/* Runs an acquire to its end; returns its result. */
static res acquire(lc_zk_lock *l, int wait_ms)
{
    res r = {0};
    assert_ok(lc_zk_lock_acquire(l, wait_ms, on_res, &r));
    assert_int_equal(r.done, 0); /* never from inside the call */
    lt_run_until(is_done, &r, wait_ms + 10000);
    assert_int_equal(r.done, 1);
    return r;
}

static res release(lc_zk_lock *l)
{
    res r = {0};
    assert_ok(lc_zk_lock_release(l, on_res, &r));
    lt_run_until(is_done, &r, 10000);
    assert_int_equal(r.done, 1);
    return r;
}

/* The children of /lctest/<name> as a synchronous client sees them (-1 on failure). */
static int count_nodes(const char *name)
{
    zhandle_t *zh = zookeeper_init(zf_hosts(zk), NULL, 5000, NULL, NULL, 0);
    if (!zh)
        return -1;
    char path[600];
    snprintf(path, sizeof path, "/lctest/%s", name);
    struct String_vector v = {0};
    int n = -1;
    for (int i = 0; i < 100 && n < 0; i++) {
        int rc = zoo_get_children(zh, path, 0, &v);
        if (rc == ZOK) {
            n = v.count;
            deallocate_String_vector(&v);
        } else if (rc == ZNONODE) {
            n = 0;
        } else {
            tu_sleep_ms(50);
        }
    }
    zookeeper_close(zh);
    return n;
}

static int group_setup(void **state)
{
    (void)state;
    int64_t t0 = tu_now_ms();
    redis = rf_start(NULL);
    zk = zf_start(1);
    fprintf(stderr, "it_zk: servers up in %lld ms\n", (long long)(tu_now_ms() - t0));
    return redis && zk ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    zf_stop(zk);
    rf_stop(redis);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return lt_loop_start();
}

static int teardown(void **state)
{
    (void)state;
    lt_loop_stop();
    return 0;
}

static lc_async_client *store_client(void)
{
    lc_async_client *s = NULL;
    assert_ok(lc_async_client_new(lt_base, rf_url(redis), NULL, &s));
    return s;
}

/* ---- mutual exclusion and fencing, judged by the store ---- */

enum { WORKERS = 4, ROUNDS = 25 };

typedef struct worker {
    lc_zk_client *c;
    lc_zk_lock *l;
    lc_async_client *store;
    const lc_script *script;
    const char *counter, *tokens, *seen;
    int rounds;
    int lost_updates, refused, errors;
    char read[32];
} worker;

static void w_next(worker *w);

static void w_released(lc_zk_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    (void)fence;
    worker *w = arg;
    w->errors += st != LC_OK;
    w->rounds++;
    w_next(w);
}

static void w_committed(lc_zk_lock *l, lc_status st, const redisReply *r, void *arg)
{
    worker *w = arg;
    if (st == LC_ELOST)
        w->refused++;
    else if (st != LC_OK)
        w->errors++;
    else if (r && r->type == REDIS_REPLY_INTEGER && r->integer < 0)
        w->lost_updates++;
    if (lc_zk_lock_release(l, w_released, w) != LC_OK) {
        w->errors++;
        w->rounds = ROUNDS;
    }
}

static void w_read(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    worker *w = arg;
    snprintf(w->read, sizeof w->read, "%s",
             st == LC_OK && r && r->type == REDIS_REPLY_STRING ? r->str : "0");
    const char *keys[] = {w->counter, w->tokens};
    const char *args[] = {w->read};
    if (lc_zk_lock_eval(w->l, w->store, w->script, w->seen, 0, 2, keys, NULL, 1, args, NULL,
                        w_committed, w) != LC_OK) {
        w->errors++;
        lc_zk_lock_release(w->l, w_released, w);
    }
}

static void w_acquired(lc_zk_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    (void)fence;
    worker *w = arg;
    if (st != LC_OK) {
        w->errors++;
        w->rounds++;
        w_next(w);
        return;
    }
    const char *argv[] = {"GET", w->counter};
    if (lc_async_command(w->store, 2, argv, NULL, w_read, w) != LC_OK) {
        w->errors++;
        lc_zk_lock_release(w->l, w_released, w);
    }
}

static void w_next(worker *w)
{
    if (w->rounds >= ROUNDS)
        return;
    if (lc_zk_lock_acquire(w->l, 20000, w_acquired, w) != LC_OK) {
        w->errors++;
        w->rounds = ROUNDS;
    }
}

static int all_done(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < WORKERS; i++)
        if (w[i].rounds < ROUNDS)
            return 0;
    return 1;
}

/* Four sessions increment one counter under the lock, reading it and writing it in two round
 * trips: no update is lost, none is refused, and the tokens the store saw strictly increase. */
static void test_exclusion_and_fencing(void **state)
{
    (void)state;
    char name[64], counter[80], tokens[80], seen[80];
    tu_unique_name(name, sizeof name, "zkex");
    snprintf(counter, sizeof counter, "%s:counter", name);
    snprintf(tokens, sizeof tokens, "%s:tokens", name);
    snprintf(seen, sizeof seen, "%s:seen", name);
    lc_script *script = NULL;
    assert_ok(lc_token_fenced_script_new(INCR_BODY, &script));
    lc_async_client *store = store_client();
    worker w[WORKERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < WORKERS; i++) {
        w[i].c = zk_client(5000);
        w[i].l = zk_lock(w[i].c, name, NULL, NULL);
        w[i].store = store;
        w[i].script = script;
        w[i].counter = counter;
        w[i].tokens = tokens;
        w[i].seen = seen;
    }
    int64_t t0 = tu_now_ms();
    for (int i = 0; i < WORKERS; i++)
        w_next(&w[i]);
    assert_true(lt_run_until(all_done, w, 60000));
    fprintf(stderr, "it_zk: %d locked increments in %lld ms\n", WORKERS * ROUNDS,
            (long long)(tu_now_ms() - t0));
    for (int i = 0; i < WORKERS; i++) {
        assert_int_equal(w[i].errors, 0);
        assert_int_equal(w[i].lost_updates, 0);
        assert_int_equal(w[i].refused, 0);
    }
    assert_int_equal(lt_get_ll(redis, counter), WORKERS * ROUNDS);
    redisReply *r = rf_command(redis, "LRANGE %s 0 -1", tokens);
    assert_non_null(r);
    assert_int_equal(r->elements, WORKERS * ROUNDS);
    unsigned long long prev = 0;
    for (size_t i = 0; i < r->elements; i++) {
        unsigned long long t = strtoull(r->element[i]->str, NULL, 10);
        if (t <= prev)
            fail_msg("token %zu = %llu after %llu: not increasing", i, t, prev);
        prev = t;
    }
    freeReplyObject(r);
    assert_int_equal(count_nodes(name), 0); /* every node deleted by its release */
    for (int i = 0; i < WORKERS; i++) {
        lc_zk_lock_free(w[i].l);
        lc_zk_client_free(w[i].c);
    }
    lc_async_client_free(store);
    lc_script_free(script);
}

/* ---- fairness and no herd ---- */

enum { WAITERS = 4 };

typedef struct fair {
    lc_zk_lock *l[WAITERS];
    int order[WAITERS], n;
    struct event *hold[WAITERS];
    res rel[WAITERS];
} fair;

static fair *the_fair;

static void on_hold_over(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    int i = (int)(intptr_t)arg;
    lc_zk_lock_release(the_fair->l[i], on_res, &the_fair->rel[i]);
}

static void on_fair_acquired(lc_zk_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    int i = (int)(intptr_t)arg;
    (void)l;
    if (st != LC_OK) {
        the_fair->order[the_fair->n++] = -100 - (int)st;
        return;
    }
    the_fair->order[the_fair->n++] = i;
    struct timeval tv = {0, 30000};
    event_add(the_fair->hold[i], &tv);
}

static int fair_done(void *arg)
{
    fair *f = arg;
    return f->n == WAITERS && f->rel[WAITERS - 1].done;
}

static int has_node(void *arg)
{
    return lc_zk_lock_node(arg)[0] != '\0';
}

/* Waiters that queued one after the other get the lock in that order, and each is woken
 * exactly once (its predecessor's deletion), not by every release. */
static void test_fair_and_no_herd(void **state)
{
    (void)state;
    char name[64];
    tu_unique_name(name, sizeof name, "zkfair");
    lc_zk_client *hc = zk_client(5000);
    lc_zk_lock *h = zk_lock(hc, name, NULL, NULL);
    assert_int_equal(acquire(h, 0).st, LC_OK);
    fair f;
    memset(&f, 0, sizeof f);
    the_fair = &f;
    lc_zk_client *c[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        c[i] = zk_client(5000);
        f.l[i] = zk_lock(c[i], name, NULL, NULL);
        f.hold[i] = evtimer_new(lt_base, on_hold_over, (void *)(intptr_t)i);
    }
    /* queue in the order 2, 0, 3, 1: arrival order, not handle or session order */
    const int arrival[WAITERS] = {2, 0, 3, 1};
    for (int k = 0; k < WAITERS; k++) {
        int i = arrival[k];
        assert_ok(lc_zk_lock_acquire(f.l[i], 20000, on_fair_acquired, (void *)(intptr_t)i));
        assert_true(lt_run_until(has_node, f.l[i], 5000));
        lt_run_until(lt_never, NULL, 50); /* its watch is set */
    }
    for (int i = 0; i < WAITERS; i++)
        assert_int_equal(lc_zk_client_watch_events(c[i]), 0);
    assert_int_equal(release(h).st, LC_OK);
    assert_true(lt_run_until(fair_done, &f, 20000));
    for (int k = 0; k < WAITERS; k++)
        assert_int_equal(f.order[k], arrival[k]);
    for (int i = 0; i < WAITERS; i++) {
        assert_int_equal(f.rel[i].st, LC_OK);
        /* one wake-up each: the deletion of the node just ahead of it */
        assert_int_equal(lc_zk_client_watch_events(c[i]), 1);
    }
    for (int i = 0; i < WAITERS; i++) {
        event_free(f.hold[i]);
        lc_zk_lock_free(f.l[i]);
        lc_zk_client_free(c[i]);
    }
    lc_zk_lock_free(h);
    lc_zk_client_free(hc);
}

/* ---- deadline, try, reentrancy ---- */

/* A waiter whose deadline passes leaves the queue (its node deleted), so the next owner is not
 * stuck behind it; a try on a busy lock answers LC_EBUSY and leaves no node either. */
static void test_deadline_removes_node(void **state)
{
    (void)state;
    char name[64];
    tu_unique_name(name, sizeof name, "zkdl");
    lc_zk_client *hc = zk_client(5000), *wc = zk_client(5000), *tc = zk_client(5000);
    lc_zk_lock *h = zk_lock(hc, name, NULL, NULL), *w = zk_lock(wc, name, NULL, NULL),
               *t = zk_lock(tc, name, NULL, NULL);
    res r = acquire(h, 0);
    assert_int_equal(r.st, LC_OK);
    uint64_t hfence = r.fence;
    assert_true(hfence > 0);
    int64_t t0 = tu_now_ms();
    r = acquire(w, 400);
    assert_int_equal(r.st, LC_ETIMEOUT);
    assert_between(r.at_ms - t0, 380, 400 + 3000);
    assert_string_equal(lc_zk_lock_node(w), "");
    r = acquire(t, 0);
    assert_int_equal(r.st, LC_EBUSY);
    lt_run_until(lt_never, NULL, 300);      /* the background deletes */
    assert_int_equal(count_nodes(name), 1); /* only the holder's */
    assert_int_equal(release(h).st, LC_OK);
    r = acquire(t, 0);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > hfence);
    assert_int_equal(release(t).st, LC_OK);
    lc_zk_lock_free(h);
    lc_zk_lock_free(w);
    lc_zk_lock_free(t);
    lc_zk_client_free(hc);
    lc_zk_client_free(wc);
    lc_zk_client_free(tc);
}

/* A handle that holds the lock takes it again (same token, hold count 2); only the last release
 * deletes the node. */
static void test_reentrant(void **state)
{
    (void)state;
    char name[64];
    tu_unique_name(name, sizeof name, "zkre");
    lc_zk_client *c = zk_client(5000);
    lc_zk_lock *l = zk_lock(c, name, NULL, NULL);
    res a = acquire(l, 0), b = acquire(l, 0);
    assert_int_equal(a.st, LC_OK);
    assert_int_equal(b.st, LC_OK);
    assert_true(a.fence == b.fence);
    assert_int_equal(lc_zk_lock_held(l), 2);
    assert_int_equal(release(l).st, LC_OK);
    assert_int_equal(lc_zk_lock_held(l), 1);
    assert_int_equal(count_nodes(name), 1);
    assert_int_equal(release(l).st, LC_OK);
    assert_int_equal(lc_zk_lock_held(l), 0);
    assert_int_equal(count_nodes(name), 0);
    assert_status(lc_zk_lock_release(l, NULL, NULL), LC_ENOTHELD);
    lc_zk_lock *bad = NULL;
    assert_status(lc_zk_lock_new(c, "", NULL, NULL, &bad), LC_EINVAL);
    assert_null(bad);
    /* names with '/' (inventoryd's segment locks) and "..": one node each, distinct */
    lc_zk_lock *s1 = zk_lock(c, "inv:2:{sku/1}:lock", NULL, NULL);
    lc_zk_lock *s2 = zk_lock(c, "inv:2:{sku%2F1}:lock", NULL, NULL);
    lc_zk_lock *s3 = zk_lock(c, "..", NULL, NULL);
    assert_int_equal(acquire(s1, 0).st, LC_OK);
    assert_int_equal(acquire(s2, 0).st, LC_OK);
    assert_int_equal(acquire(s3, 0).st, LC_OK);
    const char *want = "/lctest/inv:2:{sku%2F1}:lock/";
    assert_int_equal(strncmp(lc_zk_lock_node(s1), want, strlen(want)), 0);
    lc_zk_lock_free(s1);
    lc_zk_lock_free(s2);
    lc_zk_lock_free(s3);
    lc_zk_client *cc = NULL;
    assert_status(lc_zk_client_new(lt_base, "127.0.0.1:1/chroot", NULL, &cc), LC_EINVAL);
    assert_null(cc);
    lc_zk_lock_free(l);
    lc_zk_client_free(c);
}

/* ---- a lost session ---- */

static void on_lost_count(lc_zk_lock *l, void *arg)
{
    (void)l;
    ++*(int *)arg;
}

static int positive(void *arg)
{
    return *(int *)arg > 0;
}

/* The server paused past the session timeout: the holder is told (lost callback), sends no
 * fenced eval any more, its release answers LC_ELOST; the next holder gets a higher token, and
 * the old token is refused by the store once the new one was used. */
static void test_session_lost(void **state)
{
    (void)state;
    char name[64], key[80], seen[80];
    tu_unique_name(name, sizeof name, "zklost");
    snprintf(key, sizeof key, "%s:v", name);
    snprintf(seen, sizeof seen, "%s:seen", name);
    lc_script *script = NULL;
    assert_ok(lc_token_fenced_script_new(SET_BODY, &script));
    lc_async_client *store = store_client();
    lc_zk_client *ac = zk_client(SESSION_MS);
    int lost = 0;
    lc_zk_lock *a = zk_lock(ac, name, on_lost_count, &lost);
    res r = acquire(a, 0);
    assert_int_equal(r.st, LC_OK);
    uint64_t afence = r.fence;
    int granted = lc_zk_client_session_timeout_ms(ac);
    assert_between(granted, 400, SESSION_MS);

    int64_t t0 = tu_now_ms();
    assert_int_equal(zf_pause(zk, 0), 0);
    /* disconnected, not yet lost: suspect, so no fenced eval is sent (the session may expire
     * before it runs) */
    assert_true(lt_run_until(disconnected, ac, granted + 5000));
    const char *keys[] = {key};
    const char *args[] = {"a"};
    if (!lost)
        assert_status(lc_zk_lock_eval(a, store, script, seen, 0, 1, keys, NULL, 1, args, NULL,
                                      on_eval_res, NULL),
                      LC_EIO);
    int got = lt_run_until(positive, &lost, granted + 5000);
    int64_t took = tu_now_ms() - t0;
    zf_resume(zk, 0);
    assert_true(got);
    assert_int_equal(lost, 1);
    assert_between(took, granted / 2, granted + 3000);
    fprintf(stderr, "it_zk: lost callback %lld ms after the pause (session %d ms)\n",
            (long long)took, granted);
    assert_int_equal(lc_zk_lock_lost(a), 1);
    assert_status(
        lc_zk_lock_eval(a, store, script, seen, 0, 1, keys, NULL, 1, args, NULL, on_eval_res, NULL),
        LC_ELOST);

    lc_zk_client *bc = zk_client(5000);
    assert_true(lt_run_until(connected, bc, 10000));
    lc_zk_lock *b = zk_lock(bc, name, NULL, NULL);
    r = acquire(b, 10000);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > afence);
    res e = {0};
    const char *bargs[] = {"b"};
    assert_ok(
        lc_zk_lock_eval(b, store, script, seen, 0, 1, keys, NULL, 1, bargs, NULL, on_eval_res, &e));
    lt_run_until(is_done, &e, 5000);
    assert_int_equal(e.st, LC_OK);
    /* the old token, sent anyway (as a commit already on its way would be): refused */
    char tok[24];
    snprintf(tok, sizeof tok, "%" PRIu64, afence);
    redisReply *rr =
        rf_command(redis, "EVAL %s 2 %s %s %s a", lc_script_source(script), seen, key, tok);
    assert_non_null(rr);
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rr->element[0]->integer, 0);
    freeReplyObject(rr);
    char v[8];
    assert_int_equal(rf_string(redis, v, sizeof v, "GET %s", key), 1);
    assert_string_equal(v, "b");
    assert_int_equal(release(a).st, LC_ELOST);
    assert_int_equal(release(b).st, LC_OK);
    lc_zk_lock_free(a);
    lc_zk_lock_free(b);
    lc_zk_client_free(ac);
    lc_zk_client_free(bc);
    lc_async_client_free(store);
    lc_script_free(script);
}

/* ---- holders in child processes ---- */

/* --zk-child HOSTS NAME REDIS_URL MODE: takes the lock and writes "held <fence>" on stdout;
 * MODE "hold" then just keeps its session; MODE "commit" then runs a fenced SET of NAME:v to
 * "child" every 100 ms and writes "commit <status>" for each; MODE "stopself" stops itself
 * (SIGSTOP) inside the acquire's callback, on the loop thread, and once continued runs one
 * fenced SET at once from there, before the loop can read any session event, and writes
 * "commit <status>" (the call's status when it sent nothing, else the answer's). */
typedef struct child {
    lc_zk_lock *l;
    lc_async_client *store;
    lc_script *script;
    const char *name;
    int commit, busy, stopself;
    struct event *tick;
} child;

static lc_status child_eval(child *ch);

static void child_committed(lc_zk_lock *l, lc_status st, const redisReply *r, void *arg)
{
    (void)l;
    (void)r;
    child *ch = arg;
    ch->busy = 0;
    printf("commit %s\n", lc_status_name(st));
    fflush(stdout);
}

static void child_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    child *ch = arg;
    if (!ch->commit || ch->busy || !lc_zk_lock_held(ch->l))
        return;
    child_eval(ch);
}

static lc_status child_eval(child *ch)
{
    char key[600], seen[600];
    snprintf(key, sizeof key, "%s:v", ch->name);
    snprintf(seen, sizeof seen, "%s:seen", ch->name);
    const char *keys[] = {key};
    const char *args[] = {"child"};
    lc_status st = lc_zk_lock_eval(ch->l, ch->store, ch->script, seen, 0, 1, keys, NULL, 1, args,
                                   NULL, child_committed, ch);
    if (st == LC_OK) {
        ch->busy = 1;
    } else {
        printf("commit %s\n", lc_status_name(st));
        fflush(stdout);
    }
    return st;
}

static void child_acquired(lc_zk_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    child *ch = arg;
    printf("held %s %" PRIu64 "\n", lc_status_name(st), fence);
    fflush(stdout);
    if (ch->stopself && st == LC_OK) {
        raise(SIGSTOP); /* the whole process, the library's threads too */
        child_eval(ch);
    }
}

static int child_main(char **argv)
{
    struct event_base *base = event_base_new();
    lc_zk_opts o;
    lc_zk_opts_init(&o);
    o.session_timeout_ms = SESSION_MS;
    o.prefix = "lctest";
    child ch = {0};
    ch.name = argv[3];
    ch.commit = !strcmp(argv[5], "commit");
    ch.stopself = !strcmp(argv[5], "stopself");
    lc_zk_client *c = NULL;
    lc_client_opts co;
    lc_client_opts_init(&co);
    co.command_timeout_ms = 15000; /* waking from a pause does not tear the Redis connection */
    if (lc_zk_client_new(base, argv[2], &o, &c) != LC_OK ||
        lc_async_client_new(base, argv[4], &co, &ch.store) != LC_OK ||
        lc_token_fenced_script_new(SET_BODY, &ch.script) != LC_OK ||
        lc_zk_lock_new(c, argv[3], NULL, NULL, &ch.l) != LC_OK ||
        lc_zk_lock_acquire(ch.l, 10000, child_acquired, &ch) != LC_OK)
        return 3;
    ch.tick = event_new(base, -1, EV_PERSIST, child_tick, &ch);
    struct timeval tv = {0, 100000};
    event_add(ch.tick, &tv);
    event_base_dispatch(base);
    return 0;
}

/* Starts the child; *out gets its stdout (read end). */
static pid_t spawn_child(const char *name, const char *mode, int *out)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    const char *argv[] = {"/proc/self/exe", "--zk-child", zf_hosts(zk), name,
                          rf_url(redis),    mode,         NULL};
    pid_t pid = pr_spawn(argv, p[1], 2);
    close(p[1]);
    assert_true(pid > 0);
    *out = p[0];
    return pid;
}

/* Reads one line from fd within timeout_ms into buf. 1, or 0 on timeout or EOF. */
static int read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    size_t n = 0;
    int64_t deadline = tu_now_ms() + timeout_ms;
    while (n + 1 < size) {
        struct pollfd pf = {fd, POLLIN, 0};
        int left = (int)(deadline - tu_now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            return 0;
        char ch;
        if (read(fd, &ch, 1) != 1)
            return 0;
        if (ch == '\n')
            break;
        buf[n++] = ch;
    }
    buf[n] = '\0';
    return 1;
}

/* A holder killed with SIGKILL never releases: its session's end frees the lock, and a waiter
 * gets it about one session timeout later. */
static void test_killed_holder(void **state)
{
    (void)state;
    char name[64], line[128];
    tu_unique_name(name, sizeof name, "zkkill");
    int out;
    pid_t pid = spawn_child(name, "hold", &out);
    assert_true(read_line(out, line, sizeof line, 20000));
    assert_true(!strncmp(line, "held LC_OK ", 11));
    uint64_t cfence = strtoull(line + 11, NULL, 10);
    lc_zk_client *c = zk_client(5000);
    lc_zk_lock *l = zk_lock(c, name, NULL, NULL);
    assert_true(lt_run_until(connected, c, 10000));
    assert_int_equal(acquire(l, 0).st, LC_EBUSY);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int64_t t0 = tu_now_ms();
    res r = acquire(l, 20000);
    int64_t took = tu_now_ms() - t0;
    fprintf(stderr, "it_zk: lock free %lld ms after kill -9 of its holder (session %d ms)\n",
            (long long)took, SESSION_MS);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence > cfence);
    assert_between(took, SESSION_MS / 3, SESSION_MS + 5000);
    assert_int_equal(release(l).st, LC_OK);
    close(out);
    lc_zk_lock_free(l);
    lc_zk_client_free(c);
}

/* A holder paused (SIGSTOP) past its session timeout loses the lock to a waiter; resumed, its
 * next fenced commit is refused (by the store's token check, or before sending once it knows),
 * and the waiter's write stays. */
static void test_paused_holder_refused(void **state)
{
    (void)state;
    char name[64], line[128], key[80], seen[80];
    tu_unique_name(name, sizeof name, "zkpause");
    snprintf(key, sizeof key, "%s:v", name);
    snprintf(seen, sizeof seen, "%s:seen", name);
    int out;
    pid_t pid = spawn_child(name, "commit", &out);
    assert_true(read_line(out, line, sizeof line, 20000));
    assert_true(!strncmp(line, "held LC_OK ", 11));
    assert_true(read_line(out, line, sizeof line, 5000));
    assert_string_equal(line, "commit LC_OK"); /* the child writes while it holds */
    kill(pid, SIGSTOP);
    lc_script *script = NULL;
    assert_ok(lc_token_fenced_script_new(SET_BODY, &script));
    lc_async_client *store = store_client();
    lc_zk_client *c = zk_client(5000);
    lc_zk_lock *l = zk_lock(c, name, NULL, NULL);
    res r = acquire(l, 20000);
    assert_int_equal(r.st, LC_OK);
    res e = {0};
    const char *keys[] = {key};
    const char *args[] = {"parent"};
    assert_ok(
        lc_zk_lock_eval(l, store, script, seen, 0, 1, keys, NULL, 1, args, NULL, on_eval_res, &e));
    lt_run_until(is_done, &e, 5000);
    assert_int_equal(e.st, LC_OK);
    while (read_line(out, line, sizeof line, 0)) /* what it wrote before the pause */
        assert_string_equal(line, "commit LC_OK");
    kill(pid, SIGCONT);
    int commits = 0;
    int64_t until = tu_now_ms() + 1500;
    while (tu_now_ms() < until && read_line(out, line, sizeof line, 200)) {
        commits++;
        if (strcmp(line, "commit LC_ELOST") && strcmp(line, "commit LC_EIO"))
            fail_msg("the paused holder's commit after its session expired: %s", line);
    }
    assert_true(commits > 0);
    char v[16];
    assert_int_equal(rf_string(redis, v, sizeof v, "GET %s", key), 1);
    assert_string_equal(v, "parent");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(out);
    assert_int_equal(release(l).st, LC_OK);
    lc_zk_lock_free(l);
    lc_zk_client_free(c);
    lc_async_client_free(store);
    lc_script_free(script);
}

/* Issue 29: a holder paused past its session whose commit runs before the session event
 * reaches its loop (here: straight after SIGCONT, inside the callback that was running) is
 * refused locally, LC_ELOST, nothing sent: ZooKeeper has not answered it for a whole session
 * timeout by its own monotonic clock. Before, lc_zk_lock_eval trusted the connected flag, which
 * only the loop updates, and the commit was sent and accepted (no later holder had written).
 * About 3 s. */
static void test_paused_past_session_refused_locally(void **state)
{
    (void)state;
    char name[64], line[128], key[80];
    tu_unique_name(name, sizeof name, "zkstopself");
    snprintf(key, sizeof key, "%s:v", name);
    int out;
    pid_t pid = spawn_child(name, "stopself", &out);
    assert_true(read_line(out, line, sizeof line, 20000));
    assert_true(!strncmp(line, "held LC_OK ", 11));
    /* stopped once /proc says so; then past its session (1 s) with a wide margin */
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int stopped = 0;
    for (int64_t until = tu_now_ms() + 10000; !stopped && tu_now_ms() < until;) {
        FILE *f = fopen(path, "r");
        if (f && fgets(stat, sizeof stat, f)) {
            const char *p = strrchr(stat, ')');
            stopped = p && p[1] == ' ' && p[2] == 'T';
        }
        if (f)
            fclose(f);
        if (!stopped)
            tu_sleep_ms(5);
    }
    assert_true(stopped);
    tu_sleep_ms(2 * SESSION_MS + 500);
    kill(pid, SIGCONT);
    assert_true(read_line(out, line, sizeof line, 10000));
    fprintf(stderr, "it_zk: the commit of a holder paused past its session: %s\n", line);
    assert_string_equal(line, "commit LC_ELOST");
    assert_int_equal(rf_integer(redis, "EXISTS %s", key), 0); /* nothing written */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(out);
}

/* A client of the ensemble at hosts with its own prefix (its own token base). */
static lc_zk_client *zk_client_at(const char *hosts, const char *prefix, int session_ms)
{
    lc_zk_opts o;
    lc_zk_opts_init(&o);
    o.session_timeout_ms = session_ms;
    o.op_timeout_ms = 3000;
    o.prefix = prefix;
    lc_zk_client *c = NULL;
    lc_status st = lc_zk_client_new(lt_base, hosts, &o, &c);
    if (st != LC_OK)
        fail_msg("lc_zk_client_new: %s (%s)", lc_status_name(st), lc_errmsg());
    assert_true(lt_run_until(connected, c, 10000));
    return c;
}

/* The fenced SET of v at key under l's hold, to its end. */
static res set_under(lc_zk_lock *l, lc_async_client *store, const lc_script *s, const char *seen,
                     const char *key, const char *v)
{
    res r = {0};
    const char *keys[1] = {key};
    const char *args[1] = {v};
    assert_ok(lc_zk_lock_eval(l, store, s, seen, 0, 1, keys, NULL, 1, args, NULL, on_eval_res, &r));
    lt_run_until(is_done, &r, 10000);
    assert_int_equal(r.done, 1);
    return r;
}

/* Issue 29 item 9: the ensemble rebuilt (a second, empty ZooKeeper) under a store that has seen
 * the old one's tokens, which carried an epoch of 2 in their high 32 bits (made here by raising
 * the old ensemble's token base to 2^33 + 5: a one-node test server's zxids have epoch 0). The
 * new ensemble's first token is refused, the refusal raises its base past the seen token, and a
 * holder is accepted again within 10 s (before: refused for ever, 2^33 transactions away); the
 * old ensemble's holder, still holding there and still connected, is then refused by the store
 * (its commit sent: not the local validity check). About 5 s (a second ZooKeeper). */
static void test_rebuilt_ensemble_raises_base(void **state)
{
    (void)state;
    zf_ensemble *zk2 = zf_start(1); /* first: the loop does not run while it starts */
    assert_non_null(zk2);
    char name[64], key[80], seen[80], buf[32];
    tu_unique_name(name, sizeof name, "zkrebuilt");
    snprintf(key, sizeof key, "%s:v", name);
    snprintf(seen, sizeof seen, "%s:seen", name);
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new(SET_BODY, &s));
    lc_async_client *store = store_client();
    const uint64_t epoch2 = (2ULL << 32) | 5;
    lc_zk_client *cold = zk_client_at(zf_hosts(zk), "lcrebuilt", 10000);
    assert_ok(lc_zk_client_raise(cold, epoch2));
    lc_zk_lock *a = zk_lock(cold, name, NULL, NULL);
    res r = {0};
    for (int64_t until = tu_now_ms() + 10000; tu_now_ms() < until;) {
        r = acquire(a, 0); /* the raise lands in the background */
        assert_int_equal(r.st, LC_OK);
        if (r.fence > epoch2)
            break;
        assert_int_equal(release(a).st, LC_OK);
    }
    assert_true(r.fence > epoch2);
    uint64_t ta = r.fence;
    assert_int_equal(set_under(a, store, s, seen, key, "a").st, LC_OK);

    lc_zk_client *cnew = zk_client_at(zf_hosts(zk2), "lcrebuilt", 10000);
    lc_zk_lock *b = zk_lock(cnew, name, NULL, NULL);
    r = acquire(b, 0);
    assert_int_equal(r.st, LC_OK);
    assert_true(r.fence < ta); /* the rebuilt ensemble starts below */
    assert_int_equal(set_under(b, store, s, seen, key, "early").st, LC_ELOST);
    assert_non_null(strstr(lc_zk_lock_errmsg(b), "the store has seen"));
    assert_int_equal(release(b).st, LC_ELOST);
    int64_t t0 = tu_now_ms();
    res w = {0};
    int tries = 1;
    while (tu_now_ms() - t0 < 10000) {
        r = acquire(b, 0);
        assert_int_equal(r.st, LC_OK);
        tries++;
        w = set_under(b, store, s, seen, key, "b");
        if (w.st == LC_OK)
            break;
        release(b);
    }
    fprintf(stderr,
            "it_zk: rebuilt ensemble: old token 0x%" PRIx64 ", accepted again after %d tries, "
            "%lld ms, with 0x%" PRIx64 "\n",
            ta, tries, (long long)(tu_now_ms() - t0), r.fence);
    assert_int_equal(w.st, LC_OK);
    assert_true(r.fence > ta);
    assert_int_equal(rf_string(redis, buf, sizeof buf, "GET %s", key), 1);
    assert_string_equal(buf, "b");
    /* the old era's holder: connected, valid, and refused by the store */
    assert_int_equal(lc_zk_lock_lost(a), 0);
    assert_int_equal(set_under(a, store, s, seen, key, "stale").st, LC_ELOST);
    assert_non_null(strstr(lc_zk_lock_errmsg(a), "the store has seen"));
    assert_int_equal(rf_string(redis, buf, sizeof buf, "GET %s", key), 1);
    assert_string_equal(buf, "b");
    assert_int_equal(release(b).st, LC_OK);
    release(a);
    lc_zk_lock_free(a);
    lc_zk_lock_free(b);
    lc_zk_client_free(cold);
    lc_zk_client_free(cnew);
    lc_async_client_free(store);
    lc_script_free(s);
    zf_stop(zk2);
}

/* The token base of prefix on the ensemble at hosts, as a synchronous client reads it (-1 on
 * failure, 0 for none). */
static long long read_base(const char *hosts, const char *prefix)
{
    zhandle_t *zh = zookeeper_init(hosts, NULL, 5000, NULL, NULL, 0);
    if (!zh)
        return -1;
    char path[128], buf[32];
    snprintf(path, sizeof path, "/%s", prefix);
    long long v = -1;
    for (int i = 0; i < 100 && v < 0; i++) {
        int len = sizeof buf - 1;
        struct Stat st;
        int rc = zoo_get(zh, path, 0, buf, &len, &st);
        if (rc == ZOK) {
            buf[len > 0 ? len : 0] = '\0';
            v = len > 0 ? strtoll(buf, NULL, 10) : 0;
        } else {
            tu_sleep_ms(50);
        }
    }
    zookeeper_close(zh);
    return v;
}

static const char *base_prefix;
static int base_at_least(void *arg)
{
    return read_base(zf_hosts(zk), base_prefix) >= *(long long *)arg;
}

/* The base is read once a node is the lowest, not when it was created: a waiter queued before a
 * raise gets the raised base when its turn comes (read at create time, its token would be below
 * the seen token that caused the raise, and refused again). About 1 s. */
static void test_base_read_after_winning(void **state)
{
    (void)state;
    char name[64];
    tu_unique_name(name, sizeof name, "zkbase");
    lc_zk_client *hc = zk_client_at(zf_hosts(zk), "lcbase", 10000);
    lc_zk_client *wc = zk_client_at(zf_hosts(zk), "lcbase", 10000);
    lc_zk_lock *h = zk_lock(hc, name, NULL, NULL), *w = zk_lock(wc, name, NULL, NULL);
    res rh = acquire(h, 0);
    assert_int_equal(rh.st, LC_OK);
    res rw = {0};
    assert_ok(lc_zk_lock_acquire(w, 20000, on_res, &rw));
    lt_run_until(lt_never, NULL, 300); /* w's node is made and waits behind h's */
    assert_int_equal(rw.done, 0);
    long long want = (long long)rh.fence + (1LL << 40);
    assert_ok(lc_zk_client_raise(hc, (uint64_t)want));
    base_prefix = "lcbase";
    assert_true(lt_run_until(base_at_least, &want, 5000));
    assert_int_equal(release(h).st, LC_OK);
    lt_run_until(is_done, &rw, 10000);
    assert_int_equal(rw.st, LC_OK);
    fprintf(stderr,
            "it_zk: holder's token 0x%" PRIx64 ", base raised to 0x%llx, waiter's 0x%" PRIx64 "\n",
            rh.fence, want, rw.fence);
    assert_true(rw.fence > (uint64_t)want);
    assert_int_equal(release(w).st, LC_OK);
    lc_zk_lock_free(h);
    lc_zk_lock_free(w);
    lc_zk_client_free(hc);
    lc_zk_client_free(wc);
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--zk-child"))
        return child_main(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reentrant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exclusion_and_fencing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fair_and_no_herd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_removes_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused_holder_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused_past_session_refused_locally, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuilt_ensemble_raises_base, setup, teardown),
        cmocka_unit_test_setup_teardown(test_base_read_after_winning, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
