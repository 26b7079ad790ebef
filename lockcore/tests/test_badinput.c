/*
 * Unit tests of argument validation that need no Redis: malformed URLs, NULL handles and NULL
 * out-parameters are LC_EINVAL (or harmless for void/NULL-safe calls), and an unreachable
 * server is LC_EIO. The checks needing a live client are in it_badinput.c.
 */
#include "lc_test.h"

/* Syntactically bad URLs: LC_EINVAL, *out NULL, and no connection attempt needed. */
static void test_bad_urls(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "127.0.0.1:6379",
        "http://127.0.0.1:6379",
        "redis//127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:65536",
        "redis://127.0.0.1:99999999999999999999",
        "redis://127.0.0.1:-1",
        "redis://127.0.0.1:6379/notadb",
        "redis://127.0.0.1:6379/-1",
        "redis://127.0.0.1:6379/1x",
        "unix://",
        "unix:///tmp/lc-no.sock?db=abc",
        "unix:///tmp/lc-no.sock?db=-2",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lc_client *c = (lc_client *)&c;
        lc_status st = lc_client_new(bad[i], NULL, &c);
        if (st != LC_EINVAL)
            fail_msg("lc_client_new(\"%s\") = %s (%s), expected LC_EINVAL", bad[i],
                     lc_status_name(st), lc_errmsg());
        assert_null(c);
        assert_true(strlen(lc_errmsg()) > 0);
    }
    lc_client *c = (lc_client *)&c;
    assert_status(lc_client_new(NULL, NULL, &c), LC_EINVAL);
    assert_null(c);
}

/* Oversized URL parts (10 KB host, path, user) are rejected, not overflowed. */
static void test_oversized_urls(void **state)
{
    (void)state;
    enum { BIG = 10 * 1024 };
    char *url = malloc(BIG + 64);
    assert_non_null(url);
    /* URL = prefix + 10 KB of 'a' + suffix: a host, a socket path, a user name. */
    const char *forms[][2] = {
        {"redis://", ":6379"}, {"unix:///", ""}, {"redis://", ":pw@127.0.0.1:6379"}};
    char *part = malloc(BIG + 1);
    assert_non_null(part);
    memset(part, 'a', BIG);
    part[BIG] = '\0';
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(url, BIG + 64, "%s%s%s", forms[i][0], part, forms[i][1]);
        lc_client *c = (lc_client *)&c;
        lc_status st = lc_client_new(url, NULL, &c);
        if (st != LC_EINVAL)
            fail_msg("form %zu with a 10 KB part: %s (%s), expected LC_EINVAL", i,
                     lc_status_name(st), lc_errmsg());
        assert_null(c);
    }
    free(part);
    free(url);
}

/* Nothing listening: LC_EIO, promptly (well within the connect timeout). */
static void test_unreachable(void **state)
{
    (void)state;
    int port = tu_free_port();
    assert_true(port > 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    lc_client *c = (lc_client *)&c;
    int64_t t0 = tu_now_ms();
    assert_status(lc_client_new(url, NULL, &c), LC_EIO);
    assert_null(c);
    assert_true(tu_now_ms() - t0 < 1500);
    assert_true(strlen(lc_errmsg()) > 0);

    c = (lc_client *)&c;
    assert_status(lc_client_new("unix:///nonexistent/lc-test.sock", NULL, &c), LC_EIO);
    assert_null(c);

    /* A black-holed address: the connect timeout bounds the wait. */
    lc_client_opts o;
    lc_client_opts_init(&o);
    o.connect_timeout_ms = 300;
    c = (lc_client *)&c;
    t0 = tu_now_ms();
    assert_status(lc_client_new("redis://10.255.255.1:6379", &o, &c), LC_EIO);
    assert_null(c);
    assert_true(tu_now_ms() - t0 < 1500);
}

/* NULL out-parameters of constructors. */
static void test_null_out(void **state)
{
    (void)state;
    assert_status(lc_client_new("redis://127.0.0.1:6379", NULL, NULL), LC_EINVAL);
    assert_status(lc_script_new("return 1", NULL), LC_EINVAL);
    assert_status(lc_fenced_script_new("return 1", NULL), LC_EINVAL);
    lc_script *s = (lc_script *)&s;
    assert_status(lc_script_new(NULL, &s), LC_EINVAL);
    assert_null(s);
    s = (lc_script *)&s;
    assert_status(lc_fenced_script_new(NULL, &s), LC_EINVAL);
    assert_null(s);
}

/* A script can be made and freed without any server. */
static void test_script_offline(void **state)
{
    (void)state;
    lc_script *s = NULL;
    assert_ok(lc_script_new("return 1", &s));
    assert_non_null(s);
    lc_script_free(s);
    s = NULL;
    assert_ok(lc_fenced_script_new("return lc_fence", &s));
    assert_non_null(s);
    lc_script_free(s);
}

/* NULL handles: LC_EINVAL from every status-returning call, 0/NULL from the getters, and the
 * _free functions are NULL-safe. */
static void test_null_handles(void **state)
{
    (void)state;
    lc_client_free(NULL);
    lc_lock_free(NULL);
    lc_script_free(NULL);
    lc_multilock_free(NULL);

    const char *argv[] = {"PING"};
    redisReply *r = (redisReply *)&r;
    assert_status(lc_client_ping(NULL), LC_EINVAL);
    assert_status(lc_client_command(NULL, 1, argv, NULL, &r), LC_EINVAL);
    assert_null(r);

    lc_script *s = NULL;
    assert_ok(lc_script_new("return 1", &s));
    assert_status(lc_script_run(NULL, s, 0, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    lc_script_free(s);

    lc_lock *l = (lc_lock *)&l;
    assert_status(lc_lock_new(NULL, "name", NULL, &l), LC_EINVAL);
    assert_null(l);
    uint64_t fence = 77;
    assert_status(lc_lock_try(NULL, &fence), LC_EINVAL);
    assert_status(lc_lock_acquire(NULL, 100, &fence), LC_EINVAL);
    lc_acquire_opts ao = {0};
    redisReply *values = (redisReply *)&values;
    assert_status(lc_lock_acquire_ex(NULL, &ao, &fence, &values), LC_EINVAL);
    assert_null(values);
    assert_status(lc_lock_release(NULL), LC_EINVAL);
    assert_status(lc_lock_extend(NULL, 1000), LC_EINVAL);
    assert_status(lc_lock_force_unlock(NULL, "name"), LC_EINVAL);
    assert_status(lc_lock_eval(NULL, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    assert_int_equal(lc_lock_held(NULL), 0);
    assert_int_equal(lc_lock_lost(NULL), 0);
    assert_int_equal(lc_lock_fence(NULL), 0);
    (void)lc_lock_name(NULL);
    (void)lc_lock_token(NULL);
    assert_non_null(lc_lock_errmsg(NULL));

    const char *names[] = {"a"};
    lc_multilock *ml = (lc_multilock *)&ml;
    assert_status(lc_multilock_new(NULL, 1, names, NULL, &ml), LC_EINVAL);
    assert_null(ml);
    assert_status(lc_multilock_acquire(NULL, 0), LC_EINVAL);
    assert_status(lc_multilock_release(NULL), LC_EINVAL);
    assert_int_equal(lc_multilock_count(NULL), 0);
    assert_null(lc_multilock_get(NULL, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_urls),       cmocka_unit_test(test_oversized_urls),
        cmocka_unit_test(test_unreachable),    cmocka_unit_test(test_null_out),
        cmocka_unit_test(test_script_offline), cmocka_unit_test(test_null_handles),
    };
    return cmocka_run_group_tests_name("test_badinput", tests, NULL, NULL);
}
