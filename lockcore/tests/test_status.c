/*
 * Unit tests of status.c and the option defaults (no server): status names, the thread-local
 * lc_errmsg(), and lc_client_opts_init / lc_lock_opts_init matching lockcore.h.
 */
#include "lc_test.h"

#include <pthread.h>

/* Every status has its constant's name; unknown values still get a string. */
static void test_status_names(void **state)
{
    (void)state;
    static const struct {
        lc_status st;
        const char *name;
    } all[] = {
        {LC_OK, "LC_OK"},
        {LC_EINVAL, "LC_EINVAL"},
        {LC_ENOMEM, "LC_ENOMEM"},
        {LC_EIO, "LC_EIO"},
        {LC_EREDIS, "LC_EREDIS"},
        {LC_EBUSY, "LC_EBUSY"},
        {LC_ETIMEOUT, "LC_ETIMEOUT"},
        {LC_ENOTHELD, "LC_ENOTHELD"},
        {LC_ELOST, "LC_ELOST"},
        {LC_ESTATE, "LC_ESTATE"},
        {LC_EDOWN, "LC_EDOWN"},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_int_equal(all[i].st, (lc_status)i); /* LC_OK = 0, no gaps */
        assert_string_equal(lc_status_name(all[i].st), all[i].name);
    }
    assert_non_null(lc_status_name((lc_status)999));
    assert_non_null(lc_status_name((lc_status)-1));
}

/* Thread body: lc_errmsg() of a thread that made no call yet. */
static void *errmsg_of_fresh_thread(void *arg)
{
    const char **out = arg;
    *out = lc_errmsg();
    return NULL;
}

/* lc_errmsg() is "" until a call fails, describes the failure, and is per thread. */
static void test_errmsg_thread_local(void **state)
{
    (void)state;
    assert_non_null(lc_errmsg());
    lc_script *s = NULL;
    assert_status(lc_script_new(NULL, &s), LC_EINVAL);
    const char *msg = lc_errmsg();
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);

    const char *other = NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, errmsg_of_fresh_thread, &other), 0);
    pthread_join(t, NULL);
    assert_non_null(other);
    assert_string_equal(other, "");
}

/* The defaults documented in lockcore.h. */
static void test_opts_defaults(void **state)
{
    (void)state;
    lc_client_opts co;
    memset(&co, 0x5a, sizeof co);
    lc_client_opts_init(&co);
    assert_int_equal(co.connect_timeout_ms, 1000);
    assert_int_equal(co.command_timeout_ms, 1000);
    assert_int_equal(co.pool_max_idle, 64);

    lc_lock_opts lo;
    memset(&lo, 0x5a, sizeof lo);
    lc_lock_opts_init(&lo);
    assert_int_equal(lo.lease_ms, 30000);
    assert_int_equal(lo.watchdog, 1);
    assert_int_equal(lo.max_hold_ms, 0);
    assert_null(lo.on_lost);
    assert_null(lo.on_lost_arg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_errmsg_thread_local),
        cmocka_unit_test(test_opts_defaults),
    };
    return cmocka_run_group_tests_name("test_status", tests, NULL, NULL);
}
