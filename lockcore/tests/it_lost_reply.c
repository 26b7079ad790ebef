/*
 * Integration tests of lock.c when a reply is lost (LC_EIO after the command was sent): the
 * client talks to Redis through a delaying proxy (support/slowproxy.h) whose delay is switched
 * on for one call, so that call reaches Redis and runs there after the client gave up on it.
 *
 * - A non-final release whose reply was lost counts as done, on both sides.
 * - The hold count in Redis follows the handle's even when it drifted (an acquire or release
 *   that ran, whose reply and undo were both lost).
 *
 * Timing: the delay is 300 ms each way and the command timeout 100 ms, so the client gives up
 * long before the command even reaches Redis; every wait for the delayed traffic is a poll with
 * a bound of seconds, never an assertion on a short time.
 */
#include "lc_test.h"

#include "slowproxy.h"

static rf_server *srv;

enum { DELAY_MS = 300, TIMEOUT_MS = 100, SETTLE_MS = 3000, LEASE_MS = 30000 };

static int group_setup(void **state)
{
    (void)state;
    srv = rf_start(NULL);
    return srv != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    rf_stop(srv);
    srv = NULL;
    return 0;
}

static int flush(void **state)
{
    (void)state;
    return lt_flushall(srv);
}

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
    sp_proxy *p = sp_start(rf_port(srv));
    assert_non_null(p);
    return p;
}

/* The hold count field c of the lock equals want. */
typedef struct count_arg {
    const char *name;
    long long want;
} count_arg;

static int count_is(void *arg)
{
    const count_arg *a = arg;
    return lt_hget_ll(srv, a->name, "c") == a->want;
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
    assert_int_equal(lt_hget_ll(srv, name, "c"), 2);

    sp_set_delay_ms(p, DELAY_MS);
    lc_status st = lc_lock_release(a);
    sp_set_delay_ms(p, 0);
    assert_status(st, LC_EIO);
    count_arg ca = {name, 1};
    assert_true(tu_poll_until(count_is, &ca, SETTLE_MS, 20));
    assert_int_equal(lc_lock_held(a), 1);

    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(srv, "EXISTS %s", name), 0);
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
    lc_client *c = lt_client(rf_url(srv));
    lc_lock *a = lt_lock(c, name, LEASE_MS, 0);
    assert_ok(lc_lock_try(a, NULL));
    rf_integer(srv, "HSET %s c 2", name);
    assert_ok(lc_lock_try(a, NULL));
    assert_int_equal(lc_lock_held(a), 2);
    assert_int_equal(lt_hget_ll(srv, name, "c"), 2);
    assert_ok(lc_lock_release(a));
    assert_ok(lc_lock_release(a));
    assert_int_equal(rf_integer(srv, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

/* Redis' hold count one above the handle's (a release whose reply was lost and that did not
 * run): the handle's releases still free the lock at its last one. */
static void test_release_count_follows_handle(void **state)
{
    (void)state;
    const char *name = "it_lost_reply:drift_release";
    lc_client *c = lt_client(rf_url(srv));
    lc_lock *a = lt_lock(c, name, LEASE_MS, 0);
    assert_ok(lc_lock_try(a, NULL));
    assert_ok(lc_lock_try(a, NULL));
    rf_integer(srv, "HSET %s c 3", name);
    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 1);
    assert_int_equal(lt_hget_ll(srv, name, "c"), 1);
    assert_ok(lc_lock_release(a));
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(srv, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_release_reply_lost_counted, flush),
        cmocka_unit_test_setup(test_acquire_count_follows_handle, flush),
        cmocka_unit_test_setup(test_release_count_follows_handle, flush),
    };
    return cmocka_run_group_tests_name("it_lost_reply", tests, group_setup, group_teardown);
}
