/*
 * Integration tests of the asynchronous face (async.c) against a real redis-server, with a
 * libevent loop driven by the test thread: try/acquire/eval/release with fencing, mutual
 * exclusion between async clients and with blocking clients, one wake-up per unlock among local
 * waiters, deadlines, a Redis frozen with SIGSTOP, renewal, a lost lock, and freeing with
 * operations in flight.
 *
 * Timing: bounds are generous (the machine is small and loaded); loops run until a condition
 * holds or a deadline of seconds passes, and no sleep decides an outcome.
 */
#include "lt_loop.h"

#include <pthread.h>
#include <stdatomic.h>

#include <event2/event.h>

#include "async_internal.h"
#include "slowproxy.h"
#include "lockcore/lockcore_async.h"

/* Each test: an empty Redis and a fresh loop with a 5 ms tick, so one loop turn never blocks
 * longer than that. */
static int setup(void **state)
{
    (void)state;
    if (lt_loop_start() != 0)
        return -1;
    return rf_flushall(gf_redis);
}

static int teardown(void **state)
{
    (void)state;
    lt_loop_stop();
    return 0;
}

/* Runs the loop for ms (only where time itself is the point: a lease must run out). */
static void run_for(int ms)
{
    lt_run_until(lt_never, NULL, ms);
}

static lc_async_client *aclient(int command_timeout_ms)
{
    lc_client_opts o;
    lc_client_opts_init(&o);
    if (command_timeout_ms)
        o.command_timeout_ms = command_timeout_ms;
    lc_async_client *c = NULL;
    assert_ok(lc_async_client_new(lt_base, rf_url(gf_redis), &o, &c));
    return c;
}

static lc_async_lock *alock(lc_async_client *c, const char *name, int lease_ms, int watchdog,
                            lc_async_lost_fn on_lost, void *arg)
{
    lc_lock_opts o = lt_opts(lease_ms, watchdog);
    lc_async_lock *l = NULL;
    assert_ok(lc_async_lock_new(c, name, &o, on_lost, arg, &l));
    return l;
}

/* The result of one operation, filled by its callback. */
typedef struct result {
    int calls;
    lc_status st;
    uint64_t fence;
    long long value; /* integer reply / first read value */
    int64_t at_ms;
} result;

static int done(void *arg)
{
    return ((result *)arg)->calls > 0;
}

static void on_acquired(lc_async_lock *l, lc_status st, uint64_t fence, const redisReply *values,
                        void *arg)
{
    (void)l;
    result *r = arg;
    r->calls++;
    r->st = st;
    r->fence = fence;
    r->value = -1;
    if (values && values->elements > 0 && values->element[0]->type == REDIS_REPLY_STRING)
        r->value = atoll(values->element[0]->str);
    r->at_ms = tu_now_ms();
}

static void on_evaled(lc_async_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    result *r = arg;
    r->calls++;
    r->st = st;
    r->value = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    r->at_ms = tu_now_ms();
}

static void on_released(lc_async_lock *l, lc_status st, void *arg)
{
    (void)l;
    result *r = arg;
    r->calls++;
    r->st = st;
    r->at_ms = tu_now_ms();
}

/* Starts an acquire and runs the loop until its callback; returns its status. */
static lc_status acquire_sync(lc_async_lock *l, int wait_ms, result *r)
{
    memset(r, 0, sizeof(*r));
    assert_ok(lc_async_lock_acquire(l, wait_ms, 0, NULL, NULL, on_acquired, r));
    assert_true(lt_run_until(done, r, wait_ms + 10000));
    assert_int_equal(r->calls, 1);
    return r->st;
}

static lc_status release_sync(lc_async_lock *l)
{
    result r = {0};
    assert_ok(lc_async_release(l, on_released, &r));
    assert_true(lt_run_until(done, &r, 10000));
    assert_int_equal(r.calls, 1);
    return r.st;
}

static lc_status eval_sync(lc_async_lock *l, const lc_script *s, int flags, int nkeys,
                           const char **keys, int nargs, const char **args, long long *value)
{
    result r = {0};
    assert_ok(lc_async_eval(l, s, flags, nkeys, keys, NULL, nargs, args, NULL, on_evaled, &r));
    assert_true(lt_run_until(done, &r, 10000));
    assert_int_equal(r.calls, 1);
    if (value)
        *value = r.value;
    return r.st;
}

/* try with a read key, busy for another owner, fenced eval with release, fences increase,
 * release of nothing; the callback never runs inside the starting call. */
static void test_try_eval_release(void **state)
{
    (void)state;
    const char *name = "it_async:basic";
    assert_int_equal(rf_integer(gf_redis, "SET it_async:stock 7"), RF_NOT_INTEGER);
    lc_async_client *c = aclient(0);
    lc_async_lock *a = alock(c, name, 30000, 1, NULL, NULL);
    lc_async_lock *b = alock(c, name, 30000, 1, NULL, NULL);

    result r = {0};
    const char *reads[1] = {"it_async:stock"};
    assert_ok(lc_async_lock_try(a, 1, reads, NULL, on_acquired, &r));
    assert_int_equal(r.calls, 0); /* never from inside the call */
    assert_status(lc_async_lock_try(a, 0, NULL, NULL, on_acquired, &r), LC_ESTATE); /* one op */
    assert_true(lt_run_until(done, &r, 10000));
    assert_ok(r.st);
    assert_int_equal(r.fence, 1);
    assert_int_equal(r.value, 7);
    assert_int_equal(lc_async_lock_held(a), 1);
    assert_int_equal(lc_async_lock_fence(a), 1);

    result rb;
    assert_status(acquire_sync(b, 0, &rb), LC_EBUSY);
    assert_int_equal(rb.fence, 0);

    lc_script *dec = NULL;
    assert_ok(lc_fenced_script_new("return redis.call('DECRBY', KEYS[1], ARGV[1])", &dec));
    const char *keys[1] = {"it_async:stock"};
    const char *args[1] = {"2"};
    long long left = 0;
    assert_ok(eval_sync(a, dec, 0, 1, keys, 1, args, &left));
    assert_int_equal(left, 5);
    assert_int_equal(lc_async_lock_held(a), 1);
    assert_ok(eval_sync(a, dec, LC_EVAL_RELEASE, 1, keys, 1, args, &left));
    assert_int_equal(left, 3);
    assert_int_equal(lc_async_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_status(eval_sync(a, dec, 0, 1, keys, 1, args, NULL), LC_ENOTHELD);
    assert_status(release_sync(a), LC_ENOTHELD);

    assert_ok(acquire_sync(b, 0, &rb));
    assert_int_equal(rb.fence, 2);
    /* The old holder's fence is stale: its eval must not run (a re-acquire gets fence 3). */
    assert_ok(release_sync(b));
    assert_ok(acquire_sync(a, 0, &r));
    assert_int_equal(r.fence, 3);
    assert_ok(release_sync(a));
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET it_async:stock"), 1);
    assert_string_equal(buf, "3");

    lc_script_free(dec);
    lc_async_lock_free(a);
    lc_async_lock_free(b);
    lc_async_client_free(c);
}

/* lc_async_eval_detached: three detached evals and the handle's own eval with release, sent in
 * one loop turn, all run in the order sent under the one hold; the handle is freed before the
 * detached replies come; a detached eval on a hold that is gone on the server runs nothing
 * (LC_ELOST); on a handle that holds nothing it is refused at once (LC_ENOTHELD). */
static void on_detached(lc_status st, const redisReply *reply, const char *errstr, void *arg)
{
    (void)errstr;
    result *r = arg;
    r->calls++;
    r->st = st;
    r->value = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
}

static int all_done(void *arg)
{
    result *r = arg;
    for (int i = 0; i < 4; i++)
        if (r[i].calls == 0)
            return 0;
    return 1;
}

static void test_eval_detached(void **state)
{
    (void)state;
    const char *name = "it_async:detached";
    assert_int_equal(rf_integer(gf_redis, "SET it_async:stock 10"), RF_NOT_INTEGER);
    lc_async_client *c = aclient(0);
    lc_async_lock *a = alock(c, name, 30000, 1, NULL, NULL);
    result r;
    assert_ok(acquire_sync(a, 0, &r));
    lc_script *dec = NULL;
    assert_ok(lc_fenced_script_new("return redis.call('DECRBY', KEYS[1], ARGV[1])", &dec));
    const char *keys[1] = {"it_async:stock"};
    const char *one[1] = {"1"};
    result d[4];
    memset(d, 0, sizeof(d));
    for (int i = 0; i < 3; i++)
        assert_ok(lc_async_eval_detached(a, dec, 1, keys, NULL, 1, one, NULL, on_detached, &d[i]));
    /* The handle's own operation alongside them, sent last: it runs last. */
    assert_ok(
        lc_async_eval(a, dec, LC_EVAL_RELEASE, 1, keys, NULL, 1, one, NULL, on_evaled, &d[3]));
    assert_true(lt_run_until(all_done, d, 10000));
    for (int i = 0; i < 4; i++) {
        assert_ok(d[i].st);
        assert_int_equal(d[i].value, 9 - i); /* in the order sent */
    }
    assert_int_equal(lc_async_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_status(lc_async_eval_detached(a, dec, 1, keys, NULL, 1, one, NULL, on_detached, &d[0]),
                  LC_ENOTHELD);

    /* Freed with a detached eval in flight: its reply still comes, to the callback only. */
    assert_ok(acquire_sync(a, 0, &r));
    memset(d, 0, sizeof(d));
    assert_ok(lc_async_eval_detached(a, dec, 1, keys, NULL, 1, one, NULL, on_detached, &d[0]));
    lc_async_lock_free(a); /* its hold is released in the background, after the eval */
    assert_true(lt_run_until(done, &d[0], 10000));
    assert_ok(d[0].st);
    assert_int_equal(d[0].value, 5);

    /* The hold gone on the server (deleted behind the owner's back): nothing runs. */
    a = alock(c, name, 30000, 1, NULL, NULL);
    assert_ok(acquire_sync(a, 0, &r));
    assert_int_equal(rf_integer(gf_redis, "DEL %s", name), 1);
    memset(d, 0, sizeof(d));
    assert_ok(lc_async_eval_detached(a, dec, 1, keys, NULL, 1, one, NULL, on_detached, &d[0]));
    assert_true(lt_run_until(done, &d[0], 10000));
    assert_status(d[0].st, LC_ELOST);
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET it_async:stock"), 1);
    assert_string_equal(buf, "5");

    lc_script_free(dec);
    lc_async_lock_free(a);
    lc_async_client_free(c);
}

/* Re-entry counts exactly in Redis, as for the blocking face; a fresh SCRIPT FLUSH is
 * survived (EVAL after NOSCRIPT). */
static void test_reentry_and_noscript(void **state)
{
    (void)state;
    const char *name = "it_async:reentry";
    lc_async_client *c = aclient(0);
    lc_async_lock *a = alock(c, name, 30000, 0, NULL, NULL);
    result r;
    assert_ok(acquire_sync(a, 0, &r));
    redisReply *fl = rf_command(gf_redis, "SCRIPT FLUSH");
    freeReplyObject(fl);
    assert_ok(acquire_sync(a, 0, &r));
    assert_int_equal(lc_async_lock_held(a), 2);
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 2);
    assert_ok(release_sync(a));
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 1);
    assert_ok(release_sync(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_async_lock_free(a);
    lc_async_client_free(c);
}

/* ---- mutual exclusion: async owners on two clients and blocking owners in a thread ---- */

enum { ME_ASYNC_HANDLES = 3, ME_ROUNDS = 15, ME_BLOCKING_ROUNDS = 15 };

static const char ME_NAME[] = "it_async:mutex";
static const char ME_COUNTER[] = "it_async:counter";
static lc_script *me_get, *me_set;
/* Holders that found another holder's fencing token in ME_INSIDE between their read and their
 * write: an overlap as Redis saw it (a count on the test's side would see the replies of two
 * connections in whatever order the loop reads them, not the order Redis ran them). */
static int me_overlaps;
static const char ME_INSIDE[] = "it_async:inside";

typedef struct worker {
    lc_async_lock *lock;
    int rounds;
    int step;
    long long seen;
    uint64_t fence;
    lc_status failed;
} worker;

static void me_next(worker *w);

static void me_on_set(lc_async_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    (void)reply;
    worker *w = arg;
    if (st != LC_OK) {
        w->failed = st;
        return;
    }
    if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer == 2)
        me_overlaps++;
    w->rounds++;
    me_next(w);
}

static void me_on_get(lc_async_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    worker *w = arg;
    if (st != LC_OK) {
        w->failed = st;
        return;
    }
    w->seen = reply && reply->type == REDIS_REPLY_STRING ? atoll(reply->str) : 0;
    /* Read, then write in a second round trip: a second holder in between loses an update. */
    char v[32], f[32];
    snprintf(v, sizeof v, "%lld", w->seen + 1);
    snprintf(f, sizeof f, "%llu", (unsigned long long)w->fence);
    const char *keys[2] = {ME_COUNTER, ME_INSIDE};
    const char *args[2] = {v, f};
    lc_status s =
        lc_async_eval(l, me_set, LC_EVAL_RELEASE, 2, keys, NULL, 2, args, NULL, me_on_set, w);
    if (s != LC_OK)
        w->failed = s;
}

static void me_on_acquired(lc_async_lock *l, lc_status st, uint64_t fence, const redisReply *values,
                           void *arg)
{
    (void)values;
    worker *w = arg;
    if (st != LC_OK) {
        w->failed = st;
        return;
    }
    w->fence = fence;
    char f[32];
    snprintf(f, sizeof f, "%llu", (unsigned long long)fence);
    const char *keys[2] = {ME_COUNTER, ME_INSIDE};
    const char *args[1] = {f};
    lc_status s = lc_async_eval(l, me_get, 0, 2, keys, NULL, 1, args, NULL, me_on_get, w);
    if (s != LC_OK)
        w->failed = s;
}

static void me_next(worker *w)
{
    if (w->rounds >= ME_ROUNDS)
        return;
    lc_status s = lc_async_lock_acquire(w->lock, 30000, 0, NULL, NULL, me_on_acquired, w);
    if (s != LC_OK)
        w->failed = s;
}

typedef struct me_all {
    worker *w;
    int n;
    atomic_int *blocking_done;
} me_all;

static int me_finished(void *arg)
{
    me_all *a = arg;
    for (int i = 0; i < a->n; i++)
        if (a->w[i].rounds < ME_ROUNDS && a->w[i].failed == LC_OK)
            return 0;
    return atomic_load(a->blocking_done);
}

typedef struct blocking_arg {
    atomic_int done;
    int failed_line;
} blocking_arg;

static void *blocking_main(void *arg)
{
    blocking_arg *b = arg;
    lc_client *c = NULL;
    lc_lock *l = NULL;
    if (lc_client_new(rf_url(gf_redis), NULL, &c) != LC_OK ||
        lc_lock_new(c, ME_NAME, NULL, &l) != LC_OK) {
        b->failed_line = __LINE__;
        goto out;
    }
    for (int i = 0; i < ME_BLOCKING_ROUNDS; i++) {
        if (lc_lock_acquire(l, 30000, NULL) != LC_OK) {
            b->failed_line = __LINE__;
            break;
        }
        const char *keys[2] = {ME_COUNTER, ME_INSIDE};
        char f[32];
        snprintf(f, sizeof f, "%llu", (unsigned long long)lc_lock_fence(l));
        const char *fargs[1] = {f};
        redisReply *r = NULL;
        if (lc_lock_eval(l, me_get, 0, 2, keys, NULL, 1, fargs, NULL, &r) != LC_OK) {
            b->failed_line = __LINE__;
            break;
        }
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        tu_sleep_ms(2); /* widen the window an overlapping holder would need */
        char s[32];
        snprintf(s, sizeof s, "%lld", v + 1);
        const char *args[2] = {s, f};
        r = NULL;
        if (lc_lock_eval(l, me_set, LC_EVAL_RELEASE, 2, keys, NULL, 2, args, NULL, &r) != LC_OK ||
            !r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            freeReplyObject(r);
            b->failed_line = __LINE__; /* an overlap (2) or a failure */
            break;
        }
        freeReplyObject(r);
    }
out:
    lc_lock_free(l);
    lc_client_free(c);
    atomic_store(&b->done, 1);
    return NULL;
}

/* Two async clients with three owners each and one blocking owner on a thread take turns on
 * one lock name; each round reads the counter and writes it + 1 in two round trips. No update
 * is lost, and no holder ever finds another's fencing token in it_async:inside between its read
 * and its write (no two holders inside at once, as Redis ran them). */
static void test_mutual_exclusion(void **state)
{
    (void)state;
    /* KEYS: counter, inside.  get: ARGV fence (entered);  set: ARGV value, fence -> 1 written,
     * 2 another holder entered since this one's get (nothing written). */
    assert_ok(lc_fenced_script_new(
        "redis.call('SET', KEYS[2], ARGV[1]) return redis.call('GET', KEYS[1])", &me_get));
    assert_ok(lc_fenced_script_new("if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 2 end "
                                   "redis.call('SET', KEYS[1], ARGV[1]) return 1",
                                   &me_set));
    me_overlaps = 0;
    lc_async_client *c1 = aclient(0), *c2 = aclient(0);
    worker w[2 * ME_ASYNC_HANDLES];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 2 * ME_ASYNC_HANDLES; i++)
        w[i].lock = alock(i % 2 ? c2 : c1, ME_NAME, 30000, 1, NULL, NULL);
    blocking_arg b;
    memset(&b, 0, sizeof b);
    atomic_init(&b.done, 0);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, blocking_main, &b), 0);
    for (int i = 0; i < 2 * ME_ASYNC_HANDLES; i++)
        me_next(&w[i]);
    me_all all = {w, 2 * ME_ASYNC_HANDLES, &b.done};
    int ok = lt_run_until(me_finished, &all, 120000);
    pthread_join(tid, NULL);
    assert_true(ok);
    assert_int_equal(b.failed_line, 0);
    for (int i = 0; i < 2 * ME_ASYNC_HANDLES; i++) {
        if (w[i].failed != LC_OK)
            fail_msg("worker %d: %s", i, lc_status_name(w[i].failed));
        assert_int_equal(w[i].rounds, ME_ROUNDS);
        lc_async_lock_free(w[i].lock);
    }
    assert_int_equal(me_overlaps, 0);
    assert_int_equal(lt_get_ll(gf_redis, ME_COUNTER),
                     2 * ME_ASYNC_HANDLES * ME_ROUNDS + ME_BLOCKING_ROUNDS);
    lc_async_client_free(c1);
    lc_async_client_free(c2);
    lc_script_free(me_get);
    lc_script_free(me_set);
}

/* ---- one wake-up per unlock ---- */

enum { HERD_N = 5 };

typedef struct herd {
    lc_async_client *client;
    lc_async_lock *lock[HERD_N];
    result r[HERD_N];
    int holders; /* waiters holding right now */
    int order[HERD_N];
    int ndone;
    int releases;    /* unlocks published so far */
    long max_excess; /* max over time of wakeups - releases */
} herd;

static herd H;

static void herd_on_acquired(lc_async_lock *l, lc_status st, uint64_t fence,
                             const redisReply *values, void *arg)
{
    on_acquired(l, st, fence, values, arg);
    int i = (int)((result *)arg - H.r);
    if (st == LC_OK) {
        H.holders++;
        H.order[H.ndone++] = i;
    }
    long excess = lc_async_debug_wakeups(H.client) - H.releases;
    if (excess > H.max_excess)
        H.max_excess = excess;
}

static int herd_asleep(void *arg)
{
    (void)arg;
    return lc_async_debug_sleepers(H.client, "it_async:herd") == HERD_N;
}

static int herd_someone_holds(void *arg)
{
    (void)arg;
    return H.holders > 0;
}

/* N waiters of one client sleep on a held lock. Each unlock wakes exactly one of them (the
 * wake-ups never outnumber the unlocks), every waiter gets the lock in turn, and each one is
 * handed it by an unlock message. */
static void test_unlock_wakes_one(void **state)
{
    (void)state;
    const char *name = "it_async:herd";
    memset(&H, 0, sizeof H);
    H.client = aclient(0);
    lc_async_client *other = aclient(0);
    lc_async_lock *holder = alock(other, name, 30000, 1, NULL, NULL);
    result hr;
    assert_ok(acquire_sync(holder, 0, &hr));
    for (int i = 0; i < HERD_N; i++) {
        H.lock[i] = alock(H.client, name, 30000, 1, NULL, NULL);
        assert_ok(
            lc_async_lock_acquire(H.lock[i], 60000, 0, NULL, NULL, herd_on_acquired, &H.r[i]));
    }
    assert_true(lt_run_until(herd_asleep, NULL, 20000));
    assert_int_equal(lc_async_debug_wakeups(H.client), 0);

    H.releases = 1;
    assert_ok(release_sync(holder));
    for (int round = 0; round < HERD_N; round++) {
        assert_true(lt_run_until(herd_someone_holds, NULL, 20000));
        assert_int_equal(H.holders, 1);
        int i = H.order[H.ndone - 1];
        /* Every other waiter is still waiting. */
        int waiting = 0;
        for (int j = 0; j < HERD_N; j++)
            waiting += H.r[j].calls == 0;
        assert_int_equal(waiting, HERD_N - H.ndone);
        H.holders--;
        H.releases++;
        assert_ok(release_sync(H.lock[i]));
    }
    assert_int_equal(H.ndone, HERD_N);
    if (H.max_excess > 0)
        fail_msg("wake-ups exceeded unlocks by %ld: a herd", H.max_excess);
    assert_true(lc_async_debug_wakeups(H.client) <= HERD_N);
    /* Each hand-over was an unlock message, not a fallback poll (200 ms up, rarely first on a
     * loaded machine: one is allowed). A waiter that takes the lock marks its own hold as
     * waited for, since the others sleep on it (scripts.h): without that mark its release
     * publishes nothing and each later waiter gets the lock only by its poll. */
    long woken = lc_async_debug_wakeups(H.client);
    print_message("%ld of %d hand-overs by an unlock message\n", woken, HERD_N);
    assert_true(woken >= HERD_N - 1);
    for (int i = 0; i < HERD_N; i++) {
        assert_ok(H.r[i].st);
        lc_async_lock_free(H.lock[i]);
    }
    lc_async_lock_free(holder);
    lc_async_client_free(H.client);
    lc_async_client_free(other);
}

/* ---- deadline ---- */

static int numsub_zero(void *arg)
{
    redisReply *r = rf_command(gf_redis, "PUBSUB NUMSUB %s", (const char *)arg);
    int zero = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer == 0;
    freeReplyObject(r);
    return zero;
}

/* A wait on a lock held elsewhere ends in LC_ETIMEOUT at its deadline; its subscription is
 * dropped and it leaves no sleeper behind. */
static void test_deadline(void **state)
{
    (void)state;
    const char *name = "it_async:deadline";
    lc_async_client *c = aclient(0);
    lc_async_lock *holder = alock(c, name, 30000, 0, NULL, NULL);
    lc_async_lock *w = alock(c, name, 30000, 0, NULL, NULL);
    result r;
    assert_ok(acquire_sync(holder, 0, &r));
    int64_t t0 = tu_now_ms();
    assert_status(acquire_sync(w, 300, &r), LC_ETIMEOUT);
    assert_between(r.at_ms - t0, 290, 3000);
    assert_int_equal(lc_async_debug_sleepers(c, name), 0);
    char channel[] = "it_async:deadline:unlock";
    assert_true(lt_run_until(numsub_zero, channel, 10000));
    assert_int_equal(lc_async_lock_held(w), 0);
    /* The handle works again afterwards. */
    assert_ok(release_sync(holder));
    assert_ok(acquire_sync(w, 1000, &r));
    assert_ok(release_sync(w));
    lc_async_lock_free(holder);
    lc_async_lock_free(w);
    lc_async_client_free(c);
}

/* ---- Redis frozen ---- */

typedef struct frozen {
    result r[3];
} frozen;

static int frozen_done(void *arg)
{
    frozen *f = arg;
    return f->r[0].calls && f->r[1].calls && f->r[2].calls;
}

/* With Redis stopped (SIGSTOP), a try, a wait and a release each fail with LC_EIO by their own
 * deadline instead of hanging; after SIGCONT the client reconnects and works. */
static void test_sigstop(void **state)
{
    (void)state;
    const char *name = "it_async:frozen";
    lc_async_client *c = aclient(500);
    lc_async_lock *a = alock(c, name, 30000, 1, NULL, NULL);
    lc_async_lock *b = alock(c, "it_async:frozen2", 30000, 1, NULL, NULL);
    lc_async_lock *held = alock(c, "it_async:frozen3", 30000, 1, NULL, NULL);
    result r;
    assert_ok(acquire_sync(held, 0, &r));
    frozen f;
    memset(&f, 0, sizeof f);
    assert_int_equal(rf_pause(gf_redis), 0);
    int64_t t0 = tu_now_ms();
    assert_ok(lc_async_lock_try(a, 0, NULL, NULL, on_acquired, &f.r[0]));
    assert_ok(lc_async_lock_acquire(b, 1500, 0, NULL, NULL, on_acquired, &f.r[1]));
    assert_ok(lc_async_release(held, on_released, &f.r[2]));
    int ok = lt_run_until(frozen_done, &f, 20000);
    int64_t elapsed = tu_now_ms() - t0;
    assert_int_equal(rf_resume(gf_redis), 0);
    assert_true(ok);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f.r[i].calls, 1);
        if (f.r[i].st != LC_EIO)
            fail_msg("op %d: %s, expected LC_EIO", i, lc_status_name(f.r[i].st));
    }
    assert_between(elapsed, 400, 10000);
    assert_int_equal(lc_async_lock_held(held), 0); /* a release of unknown outcome counts */
    /* Recovery: tries succeed again once the client has reconnected. */
    int64_t until = tu_now_ms() + 15000;
    lc_status st;
    do {
        st = acquire_sync(a, 0, &r);
    } while (st == LC_EIO && tu_now_ms() < until);
    assert_ok(st);
    assert_ok(release_sync(a));
    lc_async_lock_free(a);
    lc_async_lock_free(b);
    lc_async_lock_free(held);
    lc_async_client_free(c);
}

/* ---- renewal and loss ---- */

/* A lease of 600 ms renewed on loop timers outlives several leases while held. */
static void test_renewal(void **state)
{
    (void)state;
    const char *name = "it_async:renew";
    lc_async_client *c = aclient(0);
    lc_async_lock *a = alock(c, name, 600, 1, NULL, NULL);
    result r;
    assert_ok(acquire_sync(a, 0, &r));
    run_for(2500);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, name, owner, sizeof owner), lc_async_lock_token(a));
    assert_true(rf_integer(gf_redis, "PTTL %s", name) > 0);
    assert_int_equal(lc_async_lock_lost(a), 0);
    assert_ok(release_sync(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_async_lock_free(a);
    lc_async_client_free(c);
}

static void on_lost(lc_async_lock *l, void *arg)
{
    (void)l;
    (*(int *)arg)++;
}

static int flag_set(void *arg)
{
    return *(int *)arg > 0;
}

/* A held lock deleted behind the owner's back is reported by renewal (callback and flag); the
 * next release answers LC_ELOST. */
static void test_lost(void **state)
{
    (void)state;
    const char *name = "it_async:lost";
    int lost = 0;
    lc_async_client *c = aclient(0);
    lc_async_lock *a = alock(c, name, 600, 1, on_lost, &lost);
    result r;
    assert_ok(acquire_sync(a, 0, &r));
    assert_int_equal(rf_integer(gf_redis, "DEL %s", name), 1);
    assert_true(lt_run_until(flag_set, &lost, 10000));
    assert_int_equal(lost, 1);
    assert_int_equal(lc_async_lock_lost(a), 1);
    assert_status(release_sync(a), LC_ELOST);
    assert_int_equal(lc_async_lock_held(a), 0);
    lc_async_lock_free(a);
    lc_async_client_free(c);
}

/* ---- freeing with operations in flight ---- */

/* Freeing a lock with its wait in flight, and the client with a sleeping waiter, a try and an
 * eval in flight: every callback runs exactly once with LC_ESTATE, and nothing leaks (ASan).
 * Freeing a held lock releases it in the background. */
static void test_free_in_flight(void **state)
{
    (void)state;
    const char *name = "it_async:free";
    lc_async_client *c = aclient(0);
    lc_async_lock *holder = alock(c, name, 30000, 1, NULL, NULL);
    lc_async_lock *w1 = alock(c, name, 30000, 1, NULL, NULL);
    lc_async_lock *w2 = alock(c, name, 30000, 1, NULL, NULL);
    lc_async_lock *t = alock(c, "it_async:free2", 30000, 1, NULL, NULL);
    result r, rw1 = {0}, rw2 = {0}, rt = {0}, re = {0};
    assert_ok(acquire_sync(holder, 0, &r));
    assert_ok(lc_async_lock_acquire(w1, 60000, 0, NULL, NULL, on_acquired, &rw1));
    assert_ok(lc_async_lock_acquire(w2, 60000, 0, NULL, NULL, on_acquired, &rw2));
    /* Let both waiters fall asleep, then free one of them. */
    int64_t until = tu_now_ms() + 20000;
    while (lc_async_debug_sleepers(c, name) < 2 && tu_now_ms() < until)
        event_base_loop(lt_base, EVLOOP_ONCE);
    assert_int_equal(lc_async_debug_sleepers(c, name), 2);
    lc_async_lock_free(w1);
    assert_int_equal(rw1.calls, 1);
    assert_status(rw1.st, LC_ESTATE);

    lc_script *s = NULL;
    assert_ok(lc_fenced_script_new("return 1", &s));
    assert_ok(lc_async_lock_try(t, 0, NULL, NULL, on_acquired, &rt));
    assert_ok(lc_async_eval(holder, s, 0, 0, NULL, NULL, 0, NULL, NULL, on_evaled, &re));
    lc_async_client_free(c);
    assert_int_equal(rw2.calls, 1);
    assert_status(rw2.st, LC_ESTATE);
    assert_int_equal(rt.calls, 1);
    assert_status(rt.st, LC_ESTATE);
    assert_int_equal(re.calls, 1);
    assert_status(re.st, LC_ESTATE);
    /* Orphans: every call is LC_ESTATE, and they are still freed. */
    assert_status(lc_async_release(holder, on_released, &r), LC_ESTATE);
    lc_async_lock_free(holder);
    lc_async_lock_free(w2);
    lc_async_lock_free(t);
    lc_script_free(s);
    /* Nothing of the client is left on the loop but the test's own tick. */
    run_for(50);
    assert_int_equal(event_base_get_num_events(lt_base, EVENT_BASE_COUNT_ADDED), 1);

    /* A held lock freed is released in the background. */
    c = aclient(0);
    lc_async_lock *h = alock(c, "it_async:free3", 30000, 1, NULL, NULL);
    assert_ok(acquire_sync(h, 0, &r));
    lc_async_lock_free(h);
    const char *key = "it_async:free3";
    int gone = 0;
    until = tu_now_ms() + 10000;
    while (!(gone = rf_integer(gf_redis, "EXISTS %s", key) == 0) && tu_now_ms() < until)
        event_base_loop(lt_base, EVLOOP_ONCE);
    assert_true(gone);
    lc_async_client_free(c);
}

/* ---- a lost acquire reply is undone ---- */

typedef struct undone_arg {
    const char *name;
    int64_t next_check_ms;
    int last;
} undone_arg;

/* The acquire ran (fence counter 1) and its hold is gone again (checked every 50 ms). */
static int acquire_ran_and_undone(void *arg)
{
    undone_arg *u = arg;
    if (tu_now_ms() < u->next_check_ms)
        return u->last;
    u->next_check_ms = tu_now_ms() + 50;
    char fkey[128];
    snprintf(fkey, sizeof fkey, "%s:fence", u->name);
    u->last = lt_get_ll(gf_redis, fkey) == 1 && rf_integer(gf_redis, "EXISTS %s", u->name) == 0;
    return u->last;
}

/* A try whose reply is lost (a proxy delays it past the command timeout) answers LC_EIO and
 * counts as not taken; the acquire still runs at Redis, and lockcore's undo, sent once the
 * client has reconnected, deletes the hold long before its 30 s lease ends. */
static void test_lost_reply_undone(void **state)
{
    (void)state;
    const char *name = "it_async:lostreply";
    sp_proxy *p = sp_start(rf_port(gf_redis));
    assert_non_null(p);
    lc_client_opts o;
    lc_client_opts_init(&o);
    o.command_timeout_ms = 1000;
    lc_async_client *c = NULL;
    assert_ok(lc_async_client_new(lt_base, sp_url(p), &o, &c));
    lc_async_lock *a = alock(c, name, 30000, 1, NULL, NULL);
    /* Warm up: connected, script cached (a delayed EVALSHA must run, not answer NOSCRIPT). */
    result r;
    assert_ok(acquire_sync(a, 0, &r));
    assert_ok(release_sync(a));
    assert_int_equal(rf_integer(gf_redis, "DEL %s:fence", name), 1);
    sp_set_delay_ms(p, 2000);
    assert_status(acquire_sync(a, 0, &r), LC_EIO);
    assert_int_equal(lc_async_lock_held(a), 0);
    undone_arg u = {name, 0, 0};
    int ok = lt_run_until(acquire_ran_and_undone, &u, 20000);
    if (!ok)
        fail_msg("fence %lld, exists %lld, connected %d",
                 lt_get_ll(gf_redis, "it_async:lostreply:fence"),
                 rf_integer(gf_redis, "EXISTS %s", name), lc_async_debug_connected(c));
    lc_async_lock_free(a);
    lc_async_client_free(c);
    sp_stop(p);
}

/* ---- WAIT on the connection that carried the write (lc_async_wait) ---- */

typedef struct waited {
    int calls;
    lc_status st;
    long long n;  /* WAIT's answer, or the script's */
    int have_ref; /* lc_async_reply_conn worked inside the callback */
    lc_async_conn_ref ref;
    lc_async_client *c;
} waited;

static int waited_done(void *arg)
{
    return ((waited *)arg)->calls > 0;
}

static void on_waited(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    waited *w = arg;
    w->calls++;
    w->st = st;
    w->n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    w->have_ref = lc_async_reply_conn(w->c, &w->ref) == 0;
}

/* A write by script; returns where it ran. */
static lc_async_conn_ref write_on(lc_async_client *c, const lc_script *s, const char *val)
{
    waited w = {.c = c};
    const char *keys[1] = {"it_async:wait"};
    const char *args[1] = {val};
    assert_ok(lc_async_script(c, s, 1, keys, NULL, 1, args, NULL, on_waited, &w));
    assert_true(lt_run_until(waited_done, &w, 10000));
    assert_int_equal(w.st, LC_OK);
    assert_true(w.have_ref);
    return w.ref;
}

static long long wait_on(lc_async_client *c, const lc_async_conn_ref *ref, int ms, lc_status *st)
{
    waited w = {.c = c};
    assert_ok(lc_async_wait(c, ref, 1, ms, on_waited, &w));
    assert_int_equal(w.calls, 0); /* never from inside the call */
    assert_true(lt_run_until(waited_done, &w, 10000));
    *st = w.st;
    return w.n;
}

/* Issue 18 item 4: WAIT counts the replicas that have what *its connection* carried. On the
 * connection of the write it says whether the replica has it (1 while it runs, 0 while it is
 * frozen); once that connection is gone lc_async_wait refuses (LC_EDOWN): a WAIT on the new
 * connection (lc_async_command_key, which the service used) would count what that connection
 * saw, not the write. */
static void test_wait_on_the_connection_of_the_write(void **state)
{
    (void)state;
    char port[16];
    snprintf(port, sizeof port, "%d", rf_port(gf_redis));
    const char *args[] = {"--replicaof", "127.0.0.1", port, NULL};
    rf_server *rep = rf_start(args);
    assert_non_null(rep);
    int64_t until = tu_now_ms() + 10000;
    char info[4096] = "";
    while (tu_now_ms() < until) {
        if (rf_string(gf_redis, info, sizeof info, "INFO replication") == 1 &&
            strstr(info, "state=online"))
            break;
        tu_sleep_ms(20);
    }
    assert_non_null(strstr(info, "state=online"));
    lc_script *s = NULL;
    assert_ok(lc_script_new("return redis.call('SET', KEYS[1], ARGV[1])", &s));
    lc_async_client *c = aclient(3000);
    lc_status st;
    lc_async_conn_ref ref = write_on(c, s, "1");
    assert_int_equal(wait_on(c, &ref, 2000, &st), 1);
    assert_int_equal(st, LC_OK);

    /* The replica frozen: the write's own connection says it is not there. */
    kill(rf_pid(rep), SIGSTOP);
    ref = write_on(c, s, "2");
    assert_int_equal(wait_on(c, &ref, 100, &st), 0);
    assert_int_equal(st, LC_OK);

    /* That connection dropped (as by a failover) and replaced: the WAIT is refused. */
    assert_true(rf_integer(gf_redis, "CLIENT KILL SKIPME yes TYPE normal") >= 1);
    waited ping = {.c = c};
    const char *pargv[1] = {"PING"};
    until = tu_now_ms() + 10000;
    do {
        memset(&ping, 0, sizeof ping);
        ping.c = c;
        assert_ok(lc_async_command(c, 1, pargv, NULL, on_waited, &ping));
        assert_true(lt_run_until(waited_done, &ping, 10000));
    } while (ping.st != LC_OK && tu_now_ms() < until);
    assert_int_equal(ping.st, LC_OK);
    wait_on(c, &ref, 100, &st);
    assert_int_equal(st, LC_EDOWN); /* never sent: the write's fate on the replica is unknown */
    kill(rf_pid(rep), SIGCONT);
    /* A ref outside a callback: none. */
    assert_int_equal(lc_async_reply_conn(c, &ref), -1);
    lc_async_client_free(c);
    lc_script_free(s);
    rf_stop(rep);
}

/* Failures' messages travel with their results (issue 18 item 7): two commands failing in one
 * loop turn each get their own errstr; a lock handle keeps the message of its own last failure
 * while other operations of the loop fail after it (lc_errmsg() then holds theirs). */
typedef struct errres {
    int calls;
    lc_status st;
    char msg[256];
} errres;

static void on_err_reply(lc_status st, const redisReply *reply, const char *errstr, void *arg)
{
    (void)reply;
    errres *e = arg;
    e->calls++;
    e->st = st;
    snprintf(e->msg, sizeof e->msg, "%s", errstr);
}

static int both_done(void *arg)
{
    errres *e = arg;
    return e[0].calls > 0 && e[1].calls > 0;
}

static void test_errors_travel_with_results(void **state)
{
    (void)state;
    lc_async_client *c = aclient(1000);
    assert_int_equal(rf_integer(gf_redis, "SET it_async:str abc"), RF_NOT_INTEGER);
    errres e[2];
    memset(e, 0, sizeof e);
    const char *incr[2] = {"INCR", "it_async:str"};
    const char *hget[3] = {"HGET", "it_async:str", "f"};
    assert_ok(lc_async_command(c, 2, incr, NULL, on_err_reply, &e[0]));
    assert_ok(lc_async_command(c, 3, hget, NULL, on_err_reply, &e[1]));
    assert_true(lt_run_until(both_done, e, 10000));
    assert_status(e[0].st, LC_EREDIS);
    assert_status(e[1].st, LC_EREDIS);
    if (!strstr(e[0].msg, "not an integer") || !strstr(e[1].msg, "WRONGTYPE"))
        fail_msg("INCR got \"%s\", HGET got \"%s\"", e[0].msg, e[1].msg);

    lc_async_lock *a = alock(c, "it_async:errs:x", 30000, 1, NULL, NULL);
    lc_async_lock *b = alock(c, "it_async:errs:x", 30000, 1, NULL, NULL);
    result r;
    assert_ok(acquire_sync(a, 0, &r));
    assert_string_equal(lc_async_lock_errmsg(a), "");
    assert_status(acquire_sync(b, 0, &r), LC_EBUSY);
    memset(e, 0, sizeof e);
    assert_ok(lc_async_command(c, 3, hget, NULL, on_err_reply, &e[0]));
    assert_ok(lc_async_command(c, 2, incr, NULL, on_err_reply, &e[1]));
    assert_true(lt_run_until(both_done, e, 10000));
    /* The thread's message is the last failure of the loop; b's stays its own. */
    assert_non_null(strstr(lc_errmsg(), "not an integer"));
    assert_non_null(strstr(lc_async_lock_errmsg(b), "it_async:errs:x is held by another owner"));
    assert_ok(release_sync(a));
    lc_async_lock_free(a);
    lc_async_lock_free(b);
    lc_async_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_errors_travel_with_results, setup, teardown),
        cmocka_unit_test_setup_teardown(test_try_eval_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_detached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reentry_and_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mutual_exclusion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unlock_wakes_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renewal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_undone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigstop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_on_the_connection_of_the_write, setup, teardown),
    };
    return cmocka_run_group_tests(tests, gf_group_setup, gf_group_teardown);
}
