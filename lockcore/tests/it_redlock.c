/*
 * Integration tests of Redlock's blocking face (redlock.c over redlock_async.c) against five
 * redis-server processes: a majority takes the lock and a minority cannot; it works with two
 * nodes down and refuses with three; nodes frozen with SIGSTOP during an acquire; slow nodes
 * (the elapsed time, standing for clock drift, eats the validity, and past the lease refuses
 * the lock); renewal on the quorum and a renewal that loses its majority; extend; multi-lock;
 * mutual exclusion between threads.
 *
 * Timing: only lower bounds that a timer guarantees, or bounds with seconds of margin.
 */
#include "lt_nodes.h"

#include <pthread.h>
#include <stdatomic.h>

#include "slowproxy.h"

static lt_nodes nodes;

static int group_setup(void **state)
{
    (void)state;
    return lt_nodes_start(&nodes, NULL);
}

static int setup(void **state)
{
    (void)state;
    return lt_nodes_reset(&nodes);
}

static lc_redlock_client *rclient(void)
{
    lc_redlock_client *rc = NULL;
    assert_ok(lc_redlock_client_new(LT_NODES, nodes.urls, NULL, &rc));
    return rc;
}

static lc_redlock *rlock(lc_redlock_client *rc, const char *name, const lc_redlock_opts *o,
                         lc_redlock_lost_fn on_lost, void *arg)
{
    lc_redlock *l = NULL;
    assert_ok(lc_redlock_new(rc, name, o, on_lost, arg, &l));
    return l;
}

/* The owner of a lock on a majority, exclusion, release everywhere, tokens that increase. */
static void test_acquire_release(void **state)
{
    (void)state;
    lc_redlock_client *rc = rclient();
    lc_redlock_opts o = lt_redlock_opts(10000, 0);
    lc_redlock *a = rlock(rc, "rl:basic", &o, NULL, NULL);
    lc_redlock *b = rlock(rc, "rl:basic", &o, NULL, NULL);
    uint64_t fa = 0, fb = 0;
    assert_ok(lc_redlock_try(a, &fa));
    assert_true(fa > 0);
    assert_int_equal(lc_redlock_held(a), 1);
    assert_int_equal(lc_redlock_fence(a), fa);
    assert_int_equal(lt_nodes_owned(&nodes, "rl:basic", lc_redlock_token(a)), LT_NODES);
    assert_between(lc_redlock_validity_ms(a), 1, 10000);
    assert_status(lc_redlock_try(a, NULL), LC_ESTATE); /* not reentrant */
    assert_status(lc_redlock_try(b, NULL), LC_EBUSY);
    assert_non_null(strstr(lc_errmsg(), "busy"));
    assert_status(lc_redlock_acquire(b, 150, NULL), LC_ETIMEOUT);
    assert_ok(lc_redlock_release(a));
    assert_int_equal(lc_redlock_held(a), 0);
    assert_int_equal(lt_nodes_with_key(&nodes, "rl:basic"), 0);
    assert_status(lc_redlock_release(a), LC_ENOTHELD);
    assert_ok(lc_redlock_try(b, &fb));
    assert_true(fb > fa);
    /* An lc_lock of the same name on one node is excluded there (same keys, same scripts). */
    lc_client *c = lt_client(nodes.urls[0]);
    lc_lock *single = lt_lock(c, "rl:basic", 10000, 0);
    assert_status(lc_lock_try(single, NULL), LC_EBUSY);
    lc_lock_free(single);
    lc_client_free(c);
    lc_redlock_free(b); /* releases in the background */
    lc_redlock_free(a);
    lc_redlock_client_free(rc);
}

/* Works with two of five nodes down; refuses with three, leaving nothing on the live two. */
static void test_two_down_three_down(void **state)
{
    (void)state;
    lc_redlock_client *rc = rclient();
    lc_redlock_opts o = lt_redlock_opts(10000, 0);
    lc_redlock *a = rlock(rc, "rl:down", &o, NULL, NULL);
    lc_redlock *b = rlock(rc, "rl:down", &o, NULL, NULL);
    lt_node_crash(&nodes, 3);
    lt_node_crash(&nodes, 4);
    uint64_t fence = 0;
    assert_ok(lc_redlock_acquire(a, 2000, &fence));
    assert_int_equal(lt_nodes_owned(&nodes, "rl:down", lc_redlock_token(a)), 3);
    assert_status(lc_redlock_try(b, NULL), LC_EBUSY);
    assert_ok(lc_redlock_release(a));

    lt_node_crash(&nodes, 2);
    assert_status(lc_redlock_try(a, NULL), LC_EIO);
    assert_non_null(strstr(lc_errmsg(), "no majority"));
    assert_int_equal(lc_redlock_held(a), 0);
    assert_int_equal(lt_nodes_with_key(&nodes, "rl:down"), 0); /* undone on the live two */
    assert_status(lc_redlock_acquire(a, 300, NULL), LC_ETIMEOUT);
    assert_int_equal(lt_nodes_with_key(&nodes, "rl:down"), 0);

    /* Back to three: works again (the client reconnects on its own). */
    lt_node_restart(&nodes, 2);
    assert_ok(lc_redlock_acquire(a, 5000, &fence));
    assert_ok(lc_redlock_release(a));
    lc_redlock_free(a);
    lc_redlock_free(b);
    lc_redlock_client_free(rc);
}

static int no_key(void *arg) /* arg: the key (const char *) */
{
    return lt_nodes_with_key(&nodes, arg) == 0;
}

/* Nodes frozen with SIGSTOP do not answer an acquire in flight: two frozen cost the node
 * timeout and shorten the validity by it; three frozen refuse the lock, and the undo, queued
 * behind the acquire on each frozen node, runs after it once they wake up. */
static void test_paused_nodes(void **state)
{
    (void)state;
    lc_redlock_client *rc = rclient();
    lc_redlock_opts o = lt_redlock_opts(20000, 0);
    o.node_timeout_ms = 300;
    lc_redlock *a = rlock(rc, "rl:paused", &o, NULL, NULL);
    lt_node_pause(&nodes, 0);
    lt_node_pause(&nodes, 1);
    int64_t t0 = tu_now_ms();
    assert_ok(lc_redlock_try(a, NULL));
    int64_t took = tu_now_ms() - t0;
    /* Waited for the frozen ones (libevent's timers run on a coarse clock: a few ms early). */
    assert_true(took >= 300 - 20);
    assert_true(lc_redlock_validity_ms(a) <= 20000 - 300);
    assert_int_equal(lt_nodes_owned(&nodes, "rl:paused", lc_redlock_token(a)), 3);
    assert_ok(lc_redlock_release(a));

    lt_node_pause(&nodes, 2);
    assert_status(lc_redlock_try(a, NULL), LC_EIO);
    assert_int_equal(lt_nodes_with_key(&nodes, "rl:paused"), 0);
    for (int i = 0; i < 3; i++)
        lt_node_resume(&nodes, i);
    /* The frozen nodes now run the acquires they had queued, then the releases behind them. */
    assert_true(tu_poll_until(no_key, (void *)"rl:paused", 5000, 20));
    lc_redlock_free(a);
    lc_redlock_client_free(rc);
}

/* Slow nodes stand in for a clock that runs differently: the time an attempt takes comes off
 * the validity, and an attempt slower than the lease is refused and undone. */
static void test_slow_nodes(void **state)
{
    (void)state;
    sp_proxy *px[3];
    const char *urls[LT_NODES];
    for (int i = 0; i < LT_NODES; i++)
        urls[i] = nodes.urls[i];
    for (int i = 0; i < 3; i++) {
        px[i] = sp_start(rf_port(nodes.srv[i]));
        assert_non_null(px[i]);
        urls[i] = sp_url(px[i]);
    }
    /* Commands may take longer than the default command timeout (which drops a connection). */
    lc_client_opts co;
    lc_client_opts_init(&co);
    co.command_timeout_ms = 5000;
    lc_redlock_client *rc = NULL;
    assert_ok(lc_redlock_client_new(LT_NODES, urls, &co, &rc));
    lc_redlock_opts o = lt_redlock_opts(1500, 0);
    o.node_timeout_ms = 3000;
    lc_redlock *a = rlock(rc, "rl:slow", &o, NULL, NULL);
    /* Warm up the connections through the proxies. */
    assert_ok(lc_redlock_acquire(a, 5000, NULL));
    assert_ok(lc_redlock_release(a));

    /* A majority needs one slow node: 2 x 200 ms round trip at least. */
    for (int i = 0; i < 3; i++)
        sp_set_delay_ms(px[i], 200);
    int64_t t0 = tu_now_ms();
    assert_ok(lc_redlock_try(a, NULL));
    assert_true(tu_now_ms() - t0 >= 400 - 20);
    int64_t v = lc_redlock_validity_ms(a);
    assert_between(v, 1, 1500 - 400);
    assert_ok(lc_redlock_release(a));

    /* Slower than the lease: refused although a majority granted it, and undone everywhere. */
    for (int i = 0; i < 3; i++)
        sp_set_delay_ms(px[i], 800);
    assert_status(lc_redlock_try(a, NULL), LC_EIO);
    if (!strstr(lc_errmsg(), "validity"))
        fail_msg("unexpected message: %s", lc_errmsg());
    assert_int_equal(lc_redlock_held(a), 0);
    for (int i = 0; i < 3; i++)
        sp_set_delay_ms(px[i], 0);
    assert_true(tu_poll_until(no_key, (void *)"rl:slow", 8000, 20));
    lc_redlock_free(a);
    lc_redlock_client_free(rc);
    for (int i = 0; i < 3; i++)
        sp_stop(px[i]);
}

static atomic_int lost_calls;

static void on_lost(lc_redlock *lock, void *arg)
{
    (void)arg;
    if (lc_redlock_lost(lock))
        atomic_fetch_add(&lost_calls, 1);
}

static int lost_seen(void *arg)
{
    return lc_redlock_lost(arg) && atomic_load(&lost_calls) > 0;
}

/* The watchdog renews on every node; a renewal that finds a majority gone reports the loss. */
static void test_watchdog_and_lost(void **state)
{
    (void)state;
    atomic_store(&lost_calls, 0);
    lc_redlock_client *rc = rclient();
    lc_redlock_opts o = lt_redlock_opts(1500, 1);
    lc_redlock *a = rlock(rc, "rl:wd", &o, on_lost, NULL);
    assert_ok(lc_redlock_try(a, NULL));
    tu_sleep_ms(3500); /* more than two leases */
    assert_int_equal(lc_redlock_lost(a), 0);
    assert_int_equal(lt_nodes_owned(&nodes, "rl:wd", lc_redlock_token(a)), LT_NODES);
    assert_true(lc_redlock_validity_ms(a) > 0);
    /* Two nodes lose it: still a majority. */
    for (int i = 0; i < 2; i++)
        assert_int_equal(rf_integer(nodes.srv[i], "DEL rl:wd"), 1);
    tu_sleep_ms(1000);
    assert_int_equal(lc_redlock_lost(a), 0);
    /* A third: the next renewal finds the majority gone. */
    assert_int_equal(rf_integer(nodes.srv[2], "DEL rl:wd"), 1);
    assert_true(tu_poll_until(lost_seen, a, 5000, 10));
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_true(lc_redlock_validity_ms(a) <= 0);
    assert_status(lc_redlock_extend(a, 5000), LC_ELOST);
    assert_status(lc_redlock_release(a), LC_ELOST);
    assert_int_equal(lt_nodes_with_key(&nodes, "rl:wd"), 0);

    /* Three nodes crash while it is held: renewals go unanswered until the validity ends. */
    assert_ok(lc_redlock_try(a, NULL));
    for (int i = 0; i < 3; i++)
        lt_node_crash(&nodes, i);
    assert_true(tu_poll_until(lost_seen, a, 5000, 10));
    assert_int_equal(atomic_load(&lost_calls), 2);
    assert_status(lc_redlock_release(a), LC_ELOST);
    lc_redlock_free(a);
    lc_redlock_client_free(rc);
}

/* extend sets the lease on every node; with the majority gone it reports the loss. */
static void test_extend(void **state)
{
    (void)state;
    lc_redlock_client *rc = rclient();
    lc_redlock_opts o = lt_redlock_opts(2000, 0);
    lc_redlock *a = rlock(rc, "rl:extend", &o, NULL, NULL);
    assert_status(lc_redlock_extend(a, 5000), LC_ENOTHELD);
    assert_ok(lc_redlock_try(a, NULL));
    assert_ok(lc_redlock_extend(a, 60000));
    for (int i = 0; i < LT_NODES; i++)
        assert_between(rf_integer(nodes.srv[i], "PTTL rl:extend"), 30000, 60000);
    assert_between(lc_redlock_validity_ms(a), 30000, 60000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rf_integer(nodes.srv[i], "DEL rl:extend"), 1);
    assert_status(lc_redlock_extend(a, 60000), LC_ELOST);
    assert_int_equal(lc_redlock_lost(a), 1);
    assert_status(lc_redlock_release(a), LC_ELOST);
    lc_redlock_free(a);
    lc_redlock_client_free(rc);
}

/* Several Redlock names, sorted, all or nothing. */
static void test_multi(void **state)
{
    (void)state;
    lc_redlock_client *rc = rclient();
    lc_redlock_opts o = lt_redlock_opts(10000, 0);
    const char *n1[] = {"rl:m:c", "rl:m:a", "rl:m:b", "rl:m:a"};
    const char *n2[] = {"rl:m:d", "rl:m:c"};
    lc_redlock_multi *m1 = NULL, *m2 = NULL;
    assert_ok(lc_redlock_multi_new(rc, 4, n1, &o, &m1));
    assert_ok(lc_redlock_multi_new(rc, 2, n2, &o, &m2));
    assert_int_equal(lc_redlock_multi_count(m1), 3);
    assert_string_equal(lc_redlock_name(lc_redlock_multi_get(m1, 0)), "rl:m:a");
    assert_string_equal(lc_redlock_name(lc_redlock_multi_get(m1, 2)), "rl:m:c");
    assert_ok(lc_redlock_multi_acquire(m1, 0));
    for (int i = 0; i < 3; i++)
        assert_true(lc_redlock_fence(lc_redlock_multi_get(m1, i)) > 0);
    /* m2 takes d, then finds c busy: gives d back. */
    assert_status(lc_redlock_multi_acquire(m2, 0), LC_EBUSY);
    assert_int_equal(lt_nodes_with_key(&nodes, "rl:m:d"), 0);
    assert_status(lc_redlock_multi_acquire(m2, 200), LC_ETIMEOUT);
    assert_ok(lc_redlock_multi_release(m1));
    assert_ok(lc_redlock_multi_acquire(m2, 0));
    assert_ok(lc_redlock_multi_release(m2));
    for (const char *k = "abcd"; *k; k++) {
        char key[16];
        snprintf(key, sizeof key, "rl:m:%c", *k);
        assert_int_equal(lt_nodes_with_key(&nodes, key), 0);
    }
    lc_redlock_multi_free(m1);
    lc_redlock_multi_free(m2);
    lc_redlock_client_free(rc);
}

/* Threads with their own handles on one client, and one on a client of its own: never two
 * inside at once, and every holder's token is above the previous holder's. */
enum { THREADS = 4, ROUNDS = 15 };
static atomic_int inside, overlaps, done_rounds;
static _Atomic uint64_t last_fence;
static atomic_int fence_regressions;

typedef struct worker {
    lc_redlock_client *rc;
    int failures;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    lc_redlock_opts o = lt_redlock_opts(10000, 1);
    lc_redlock *l = NULL;
    if (lc_redlock_new(w->rc, "rl:threads", &o, NULL, NULL, &l) != LC_OK) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t f = 0;
        if (lc_redlock_acquire(l, 20000, &f) != LC_OK) {
            w->failures++;
            continue;
        }
        if (atomic_fetch_add(&inside, 1) != 0)
            atomic_fetch_add(&overlaps, 1);
        if (f <= atomic_load(&last_fence))
            atomic_fetch_add(&fence_regressions, 1);
        atomic_store(&last_fence, f);
        tu_sleep_ms(1);
        atomic_fetch_sub(&inside, 1);
        if (lc_redlock_release(l) != LC_OK)
            w->failures++;
        atomic_fetch_add(&done_rounds, 1);
    }
    lc_redlock_free(l);
    return NULL;
}

static void test_threads_exclusion(void **state)
{
    (void)state;
    atomic_store(&inside, 0);
    atomic_store(&overlaps, 0);
    atomic_store(&done_rounds, 0);
    atomic_store(&last_fence, 0);
    atomic_store(&fence_regressions, 0);
    lc_redlock_client *shared = rclient(), *own = rclient();
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.rc = i == 0 ? own : shared};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(atomic_load(&done_rounds), THREADS * ROUNDS);
    assert_int_equal(atomic_load(&overlaps), 0);
    assert_int_equal(atomic_load(&fence_regressions), 0);
    lc_redlock_client_free(shared);
    lc_redlock_client_free(own);
}

/* Bad arguments are refused without a Redis call. */
static void test_bad_arguments(void **state)
{
    (void)state;
    lc_redlock_client *rc = NULL;
    const char *urls[2] = {"redis://127.0.0.1:1", NULL};
    assert_status(lc_redlock_client_new(0, urls, NULL, &rc), LC_EINVAL);
    assert_status(lc_redlock_client_new(2, urls, NULL, &rc), LC_EINVAL);
    assert_null(rc);
    urls[1] = "http://nope";
    assert_status(lc_redlock_client_new(2, urls, NULL, &rc), LC_EINVAL);
    rc = rclient();
    lc_redlock *l = NULL;
    lc_redlock_opts o = lt_redlock_opts(0, 0);
    assert_status(lc_redlock_new(rc, "x", &o, NULL, NULL, &l), LC_EINVAL);
    o = lt_redlock_opts(1000, 0);
    o.node_timeout_ms = 0;
    assert_status(lc_redlock_new(rc, "x", &o, NULL, NULL, &l), LC_EINVAL);
    assert_status(lc_redlock_new(rc, "", NULL, NULL, NULL, &l), LC_EINVAL);
    assert_null(l);
    l = rlock(rc, "x", NULL, NULL, NULL);
    assert_status(lc_redlock_acquire(l, -1, NULL), LC_EINVAL);
    assert_status(lc_redlock_extend(l, 0), LC_EINVAL);
    lc_redlock_free(l);
    lc_redlock_client_free(rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_acquire_release, setup),
        cmocka_unit_test_setup(test_two_down_three_down, setup),
        cmocka_unit_test_setup(test_paused_nodes, setup),
        cmocka_unit_test_setup(test_slow_nodes, setup),
        cmocka_unit_test_setup(test_watchdog_and_lost, setup),
        cmocka_unit_test_setup(test_extend, setup),
        cmocka_unit_test_setup(test_multi, setup),
        cmocka_unit_test_setup(test_threads_exclusion, setup),
        cmocka_unit_test_setup(test_bad_arguments, setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gf_group_teardown);
}
