/*
 * Integration tests of lock.c when a reply is lost (LC_EIO after the command was sent): the
 * client talks to Redis through a delaying proxy (support/slowproxy.h) whose delay is switched
 * on for one call, so that call reaches Redis and runs there after the client gave up on it.
 *
 * - An acquire whose reply was lost must not leave the lock blocked for its whole lease:
 *   lockcore undoes it (owner-checked) on another connection.
 * - A re-entrant acquire whose reply was lost, retried, counts once.
 * - A non-final release whose reply was lost counts as done, on both sides.
 * - The hold count in Redis follows the handle's even when it drifted (an acquire or release
 *   that ran, whose reply and undo were both lost).
 *
 * Timing: the delay is 2 s each way and the command timeout 1 s, so the client gives up long
 * before the command even reaches Redis, and undelayed calls have a whole second for their
 * round trip on a loaded machine; every wait for the delayed traffic is a poll with a bound of
 * seconds, never an assertion on a short time.
 */
#include "lc_test.h"

#include "slowproxy.h"

enum { DELAY_MS = 2000, TIMEOUT_MS = 1000, SETTLE_MS = 10000, LEASE_MS = 30000 };

/* A client through the proxy with a short command timeout. It takes and releases a lock of
 * its own once, so Redis has the lock scripts cached: a delayed EVALSHA must run, not answer
 * NOSCRIPT. */
static lc_client *slow_client(sp_proxy *p)
{
    lc_client_opts o = *lt_client_opts();
    o.command_timeout_ms = TIMEOUT_MS;
    lc_client *c = NULL;
    lc_status st = lc_client_new(sp_url(p), &o, &c);
    if (st != LC_OK)
        fail_msg("lc_client_new(%s): %s (%s)", sp_url(p), lc_status_name(st), lc_errmsg());
    lc_lock *warm = lt_lock(c, "it_lost_reply:warmup", LEASE_MS, 0);
    assert_ok(lc_lock_try(warm, NULL));
    assert_ok(lc_lock_release(warm));
    lc_lock_free(warm);
    return c;
}

static sp_proxy *proxy(void)
{
    sp_proxy *p = sp_start(rf_port(gf_redis));
    assert_non_null(p);
    return p;
}

static int proxy_drained(void *arg)
{
    return sp_pending(arg) == 0;
}

/* Waits until everything delayed has passed the proxy, then a little for Redis to run it. */
static void drain(sp_proxy *p)
{
    assert_true(tu_poll_until(proxy_drained, p, SETTLE_MS, 20));
    tu_sleep_ms(300);
}

/* The acquire ran (its fencing counter is at want) and the lock key is gone again. */
typedef struct undone_arg {
    const char *name;
    long long fence;
} undone_arg;

static int acquire_ran_and_undone(void *arg)
{
    const undone_arg *u = arg;
    char fkey[128];
    snprintf(fkey, sizeof fkey, "%s:fence", u->name);
    return lt_get_ll(gf_redis, fkey) == u->fence && rf_integer(gf_redis, "EXISTS %s", u->name) == 0;
}

/* The hold count field c of the lock equals want. */
typedef struct count_arg {
    const char *name;
    long long want;
} count_arg;

static int count_is(void *arg)
{
    const count_arg *a = arg;
    return lt_hget_ll(gf_redis, a->name, "c") == a->want;
}

enum { VIA_TRY, VIA_ACQUIRE, VIA_ACQUIRE_EX };

/* One acquire of a fresh lock (try, lock-with-deadline, or with a read key) whose reply is
 * lost: the call answers LC_EIO, the script runs at Redis after that (fence 1), and lockcore's
 * undo deletes the lock, so another owner gets it long before the 30 s lease ends. Before the
 * fix the lock stayed for the whole lease. */
static void acquire_lost(int via, const char *name)
{
    sp_proxy *p = proxy();
    lc_client *c = slow_client(p);
    lc_client *direct = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, LEASE_MS, 1);
    lc_lock *b = lt_lock(direct, name, LEASE_MS, 0);

    sp_set_delay_ms(p, DELAY_MS);
    lc_status st;
    redisReply *values = NULL;
    const char *reads[1] = {"it_lost_reply:data"};
    lc_acquire_opts ao = {.wait_ms = 2000, .nread = 1, .read_keys = reads};
    if (via == VIA_TRY)
        st = lc_lock_try(a, NULL);
    else if (via == VIA_ACQUIRE)
        st = lc_lock_acquire(a, 2000, NULL);
    else
        st = lc_lock_acquire_ex(a, &ao, NULL, &values);
    sp_set_delay_ms(p, 0);
    assert_status(st, LC_EIO);
    assert_null(values);
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(lc_lock_fence(a), 0);

    undone_arg u = {name, 1};
    if (!tu_poll_until(acquire_ran_and_undone, &u, SETTLE_MS, 20)) {
        char fkey[128];
        snprintf(fkey, sizeof fkey, "%s:fence", name);
        fail_msg("%s: fence %lld, lock pttl %lld ms: the lost acquire was not undone", name,
                 lt_get_ll(gf_redis, fkey), rf_integer(gf_redis, "PTTL %s", name));
    }
    uint64_t fence = 0;
    assert_ok(lc_lock_try(b, &fence));
    assert_int_equal(fence, 2);
    assert_ok(lc_lock_release(b));

    /* The handle works normally afterwards. */
    assert_ok(lc_lock_try(a, NULL));
    assert_int_equal(lc_lock_held(a), 1);
    assert_ok(lc_lock_release(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);

    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
    lc_client_free(direct);
    sp_stop(p);
}

static void test_try_reply_lost_undone(void **state)
{
    (void)state;
    acquire_lost(VIA_TRY, "it_lost_reply:try");
}

static void test_acquire_reply_lost_undone(void **state)
{
    (void)state;
    acquire_lost(VIA_ACQUIRE, "it_lost_reply:acquire");
}

static void test_acquire_ex_reply_lost_undone(void **state)
{
    (void)state;
    acquire_lost(VIA_ACQUIRE_EX, "it_lost_reply:acquire_ex");
}

/* A re-entrant acquire whose reply is lost (it ran: c went to 2) and that the caller then
 * retries counts once: hold count 2 on both sides, and two releases free the lock. Before the
 * fix the retry incremented again: 3 on both sides, and the lock outlived the caller's last
 * release. */
static void test_reentrant_reply_lost_counted_once(void **state)
{
    (void)state;
    const char *name = "it_lost_reply:reentrant";
    sp_proxy *p = proxy();
    lc_client *c = slow_client(p);
    lc_lock *a = lt_lock(c, name, LEASE_MS, 0);
    uint64_t f1 = 0, f2 = 0;
    assert_ok(lc_lock_try(a, &f1));

    sp_set_delay_ms(p, DELAY_MS);
    lc_status st = lc_lock_try(a, NULL);
    sp_set_delay_ms(p, 0);
    assert_status(st, LC_EIO);
    assert_int_equal(lc_lock_held(a), 1);
    drain(p); /* the delayed acquire (and whatever followed it) ran */

    assert_ok(lc_lock_try(a, &f2));
    assert_int_equal(f2, f1);
    assert_int_equal(lc_lock_held(a), 2);
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 2);
    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 1);
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 1);
    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
    sp_stop(p);
}

/* A non-final release whose reply is lost (it ran: c went to 1) counts as done: the handle
 * holds 1 like Redis, and one more release frees the lock. Before the fix the handle still
 * counted 2. */
static void test_release_reply_lost_counted(void **state)
{
    (void)state;
    const char *name = "it_lost_reply:release";
    sp_proxy *p = proxy();
    lc_client *c = slow_client(p);
    lc_lock *a = lt_lock(c, name, LEASE_MS, 0);
    assert_ok(lc_lock_try(a, NULL));
    assert_ok(lc_lock_try(a, NULL));
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 2);

    sp_set_delay_ms(p, DELAY_MS);
    lc_status st = lc_lock_release(a);
    sp_set_delay_ms(p, 0);
    assert_status(st, LC_EIO);
    count_arg ca = {name, 1};
    assert_true(tu_poll_until(count_is, &ca, SETTLE_MS, 20));
    assert_int_equal(lc_lock_held(a), 1);

    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_status(lc_lock_release(a), LC_ENOTHELD);
    lc_lock_free(a);
    lc_client_free(c);
    sp_stop(p);
}

/* Redis' hold count one above the handle's (an acquire that ran whose reply and undo were both
 * lost): the next re-entry sets it from the handle's count, it does not add to it. */
static void test_acquire_count_follows_handle(void **state)
{
    (void)state;
    const char *name = "it_lost_reply:drift_acquire";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, LEASE_MS, 0);
    assert_ok(lc_lock_try(a, NULL));
    rf_integer(gf_redis, "HSET %s c 2", name);
    assert_ok(lc_lock_try(a, NULL));
    assert_int_equal(lc_lock_held(a), 2);
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 2);
    assert_ok(lc_lock_release(a));
    assert_ok(lc_lock_release(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

/* Redis' hold count one above the handle's (a release whose reply was lost and that did not
 * run): the handle's releases still free the lock at its last one. */
static void test_release_count_follows_handle(void **state)
{
    (void)state;
    const char *name = "it_lost_reply:drift_release";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, LEASE_MS, 0);
    assert_ok(lc_lock_try(a, NULL));
    assert_ok(lc_lock_try(a, NULL));
    rf_integer(gf_redis, "HSET %s c 3", name);
    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 1);
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 1);
    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_try_reply_lost_undone, gf_flush),
        cmocka_unit_test_setup(test_acquire_reply_lost_undone, gf_flush),
        cmocka_unit_test_setup(test_acquire_ex_reply_lost_undone, gf_flush),
        cmocka_unit_test_setup(test_reentrant_reply_lost_counted_once, gf_flush),
        cmocka_unit_test_setup(test_release_reply_lost_counted, gf_flush),
        cmocka_unit_test_setup(test_acquire_count_follows_handle, gf_flush),
        cmocka_unit_test_setup(test_release_count_follows_handle, gf_flush),
    };
    return cmocka_run_group_tests_name("it_lost_reply", tests, gf_group_setup, gf_group_teardown);
}
