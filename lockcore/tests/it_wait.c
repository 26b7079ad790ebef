/*
 * Integration tests of lock-with-deadline and the unlock listener (notify.c): the deadline is
 * kept, an unlock wakes a waiter (the handle says its wait ended by the unlock message, not by
 * the back-off poll's timer), an unlock racing with the waiter's subscription is not missed, a
 * queue of waiters hands the lock on promptly and exclusively, and force-unlock wakes waiters too.
 */
#include "lc_test.h"
#include "lock_internal.h"

#include <pthread.h>
#include <stdatomic.h>

/* Whether a waiter was woken by the unlock message is read from the handle (lc_lock_last_wake),
 * not guessed from how fast it came: on a loaded machine a pub/sub wake-up can take longer than
 * the fallback poll's first period (200 ms). This bound only catches a hang. */
#define WAKE_MAX_US 2000000

/* One lc_lock_acquire on its own thread. */
typedef struct waiter {
    lc_lock *lock;
    int wait_ms;
    atomic_int started;
    lc_status st;
    int64_t done_us;
    pthread_t tid;
} waiter;

/* Thread body: one lc_lock_acquire, noting status and when it returned. */
static void *waiter_main(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->st = lc_lock_acquire(w->lock, w->wait_ms, NULL);
    w->done_us = tu_now_us();
    return NULL;
}

/* Starts a waiter thread and returns once it runs (it is then about to wait). */
static void waiter_start(waiter *w, lc_lock *lock, int wait_ms)
{
    memset(w, 0, sizeof *w);
    w->lock = lock;
    w->wait_ms = wait_ms;
    assert_int_equal(pthread_create(&w->tid, NULL, waiter_main, w), 0);
    while (!atomic_load(&w->started))
        tu_sleep_us(100);
}

/* Waiting 300 ms on a lock held with a long lease ends in LC_ETIMEOUT after 290..500 ms, and
 * leaves the handle clean. */
static void test_deadline_timeout(void **state)
{
    (void)state;
    const char *name = "it_wait:deadline";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));

    int64_t t0 = tu_now_ms();
    uint64_t fence = 0;
    assert_status(lc_lock_acquire(b, 300, &fence), LC_ETIMEOUT);
    int64_t took = tu_now_ms() - t0;
    print_message("timed out after %lld ms\n", (long long)took);
    assert_between(took, 290, 800); /* near the deadline; slack for a loaded machine */
    assert_int_equal(lc_lock_held(b), 0);
    assert_int_equal(lc_lock_fence(b), 0);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, name, owner, sizeof owner), lc_lock_token(a));

    assert_ok(lc_lock_release(a));
    assert_ok(lc_lock_acquire(b, 300, NULL));
    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* Many short deadlines: none returns early, none overshoots by more than scheduling noise on a
 * loaded 2-core machine (the bound is generous on purpose: this is about "near", not speed). */
static void test_short_deadlines(void **state)
{
    (void)state;
    const char *name = "it_wait:short";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    for (int i = 0; i < 20; i++) {
        int64_t t0 = tu_now_us();
        assert_status(lc_lock_acquire(b, 20, NULL), LC_ETIMEOUT);
        assert_between((tu_now_us() - t0) / 1000, 19, 300);
    }
    assert_ok(lc_lock_release(a));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* The holder releases at a known moment; the waiter's acquire is woken by the unlock message.
 * Three rounds with different hold times. The fallback poll's jittered timer can fire in the
 * same millisecond as the release and win the race against the message (seen once in a TSan
 * CI run: woken 769 us after the release, by the poll), so one round of three may end by the
 * poll; if the unlock message never woke anyone, every round would, and the test fails. */
static void test_unlock_wakes_waiter(void **state)
{
    (void)state;
    const char *name = "it_wait:wake";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    const int holds[] = {300, 370, 440};
    int by_unlock = 0;
    for (int i = 0; i < 3; i++) {
        assert_ok(lc_lock_acquire(a, 0, NULL));
        waiter w;
        waiter_start(&w, b, 5000);
        tu_sleep_ms(holds[i]);
        int64_t t_rel = tu_now_us();
        assert_ok(lc_lock_release(a));
        pthread_join(w.tid, NULL);
        assert_status(w.st, LC_OK);
        int64_t lat = w.done_us - t_rel;
        int unlock = lc_lock_last_wake(b) == LC_WAKE_UNLOCK;
        print_message("round %d: woken %lld us after the release, by the %s\n", i, (long long)lat,
                      unlock ? "unlock message" : "poll");
        by_unlock += unlock;
        assert_between(lat, 0, WAKE_MAX_US);
        assert_ok(lc_lock_release(b));
    }
    assert_true(by_unlock >= 2);
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* An unlock that lands while the waiter is between its first try and its subscription must
 * not be missed (it would cost a whole back-off period): release after 0..3 ms, 40 times. */
static void test_unlock_race_not_missed(void **state)
{
    (void)state;
    const char *name = "it_wait:race";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    int64_t worst = 0;
    for (int i = 0; i < 40; i++) {
        assert_ok(lc_lock_acquire(a, 0, NULL));
        waiter w;
        waiter_start(&w, b, 5000);
        tu_sleep_us((i % 8) * 400);
        int64_t t_rel = tu_now_us();
        assert_ok(lc_lock_release(a));
        pthread_join(w.tid, NULL);
        assert_status(w.st, LC_OK);
        int64_t lat = w.done_us - t_rel;
        if (lat > worst)
            worst = lat;
        /* The unlock either came before the retry that follows the subscription (no wait) or
         * woke the wait; a wait ended by the poll's timer means the unlock was missed. */
        if (lc_lock_last_wake(b) == LC_WAKE_POLL || lat > WAKE_MAX_US)
            fail_msg("round %d: waiter took %lld us after the release, last wait ended by %s "
                     "(missed wake-up)",
                     i, (long long)lat, lc_lock_last_wake(b) == LC_WAKE_POLL ? "the poll" : "?");
        assert_ok(lc_lock_release(b));
    }
    print_message("worst wake-up %lld us\n", (long long)worst);
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* A queue of waiters (one owner each) that hold for 30 ms: exclusive, and each hand-over
 * is made by an unlock message (not a poll). */
enum { QUEUE_N = 4, QUEUE_HOLD_MS = 30 };

typedef struct queue_state {
    atomic_int inside;
    atomic_int overlaps;
    atomic_int n;
    int64_t acq_us[QUEUE_N + 1];
    int64_t rel_us[QUEUE_N + 1];
    pthread_mutex_t mu;
} queue_state;

typedef struct queue_worker {
    lc_lock *lock;
    queue_state *q;
    lc_status st;
    int wake; /* how its acquire's last wait ended */
    pthread_t tid;
} queue_worker;

/* Acquire, hold QUEUE_HOLD_MS (checking nobody else is inside), note times, release. */
static void *queue_main(void *arg)
{
    queue_worker *w = arg;
    w->st = lc_lock_acquire(w->lock, 5000, NULL);
    if (w->st != LC_OK)
        return NULL;
    int64_t acq = tu_now_us();
    w->wake = lc_lock_last_wake(w->lock);
    if (atomic_fetch_add(&w->q->inside, 1) != 0)
        atomic_fetch_add(&w->q->overlaps, 1);
    tu_sleep_ms(QUEUE_HOLD_MS);
    atomic_fetch_sub(&w->q->inside, 1);
    pthread_mutex_lock(&w->q->mu);
    int k = atomic_fetch_add(&w->q->n, 1) + 1;
    w->q->acq_us[k] = acq;
    w->q->rel_us[k] = tu_now_us();
    pthread_mutex_unlock(&w->q->mu);
    w->st = lc_lock_release(w->lock);
    return NULL;
}

static void test_waiter_queue(void **state)
{
    (void)state;
    const char *name = "it_wait:queue";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    queue_state q;
    memset(&q, 0, sizeof q);
    pthread_mutex_init(&q.mu, NULL);
    queue_worker w[QUEUE_N];
    for (int i = 0; i < QUEUE_N; i++) {
        w[i].lock = lt_lock(c, name, 30000, 0);
        w[i].q = &q;
        assert_int_equal(pthread_create(&w[i].tid, NULL, queue_main, &w[i]), 0);
    }
    tu_sleep_ms(300);
    q.rel_us[0] = tu_now_us();
    assert_ok(lc_lock_release(a));
    /* Every worker is joined before anything is asserted: a failed assertion returns from
     * this function, and a worker still running would then write into q, on this frame
     * (an ASan stack-use-after-scope in the next test of a clean-clone CI run). */
    for (int i = 0; i < QUEUE_N; i++)
        pthread_join(w[i].tid, NULL);
    int by_unlock = 0;
    for (int i = 0; i < QUEUE_N; i++) {
        assert_status(w[i].st, LC_OK);
        by_unlock += w[i].wake == LC_WAKE_UNLOCK;
        lc_lock_free(w[i].lock);
    }
    /* Each waited (the lock was held when it started) and was handed the lock by an unlock
     * message, not by its poll: on a loaded machine a waiter's poll may come first now and then
     * (one of QUEUE_N, wake 2, in a clean-clone ASan run), so most, not all; with the unlock
     * messages lost every one would be woken by its poll. */
    print_message("woken by the unlock message: %d of %d\n", by_unlock, QUEUE_N);
    assert_true(by_unlock * 2 > QUEUE_N);
    assert_int_equal(atomic_load(&q.overlaps), 0);
    assert_int_equal(atomic_load(&q.n), QUEUE_N);
    /* The k-th hold began after the (k-1)-th ended (the release is just after rel_us). */
    for (int k = 1; k <= QUEUE_N; k++) {
        int64_t gap = q.acq_us[k] - q.rel_us[k - 1];
        print_message("hand-over %d: %lld us\n", k, (long long)gap);
        assert_between(gap, 0, WAKE_MAX_US);
    }
    pthread_mutex_destroy(&q.mu);
    lc_lock_free(a);
    lc_client_free(c);
}

/* One force_unlock of a lock a waiter waits for: the waiter gets the lock promptly; returns how
 * it was woken (lc_lock_last_wake). */
static int force_unlock_round(lc_client *c, const char *name)
{
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    waiter w;
    waiter_start(&w, b, 5000);
    tu_sleep_ms(330);
    int64_t t_rel = tu_now_us();
    assert_ok(lc_lock_force_unlock(c, name));
    pthread_join(w.tid, NULL);
    assert_status(w.st, LC_OK);
    int wake = lc_lock_last_wake(b);
    assert_between(w.done_us - t_rel, 0, WAKE_MAX_US);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, name, owner, sizeof owner), lc_lock_token(b));
    assert_ok(lc_lock_release(b));
    assert_status(lc_lock_release(a), LC_ELOST);
    lc_lock_free(a);
    lc_lock_free(b);
    return wake;
}

/* force_unlock publishes the unlock too: a waiter is woken by it. The waiter's fallback poll
 * can win the race with the message now and then on a loaded machine (once at load 8), so up
 * to 3 rounds, one of which must be woken by the unlock: a force_unlock that published nothing
 * would be woken by the poll every time. */
static void test_force_unlock_wakes(void **state)
{
    (void)state;
    lc_client *c = lt_client(rf_url(gf_redis));
    int wake = -1;
    for (int i = 0; i < 3 && wake != LC_WAKE_UNLOCK; i++) {
        wake = force_unlock_round(c, "it_wait:force");
        print_message("round %d: woken by %d\n", i, wake);
    }
    assert_int_equal(wake, LC_WAKE_UNLOCK);
    lc_client_free(c);
}

/* A waiter whose lock's holder vanished without unlocking (lease ran out, no publish) still
 * gets it through the back-off fallback, within a lease plus a back-off or so. */
static void test_expiry_without_unlock(void **state)
{
    (void)state;
    const char *name = "it_wait:expiry";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 400, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    int64_t t0 = tu_now_ms();
    assert_ok(lc_lock_acquire(b, 3000, NULL));
    int64_t took = tu_now_ms() - t0;
    print_message("acquired %lld ms after the holder's last lease began\n", (long long)took);
    assert_between(took, 350, 400 + 300);
    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_deadline_timeout, gf_flush),
        cmocka_unit_test_setup(test_short_deadlines, gf_flush),
        cmocka_unit_test_setup(test_unlock_wakes_waiter, gf_flush),
        cmocka_unit_test_setup(test_unlock_race_not_missed, gf_flush),
        cmocka_unit_test_setup(test_waiter_queue, gf_flush),
        cmocka_unit_test_setup(test_force_unlock_wakes, gf_flush),
        cmocka_unit_test_setup(test_expiry_without_unlock, gf_flush),
    };
    return cmocka_run_group_tests_name("it_wait", tests, gf_group_setup, gf_group_teardown);
}
