/*
 * Argument validation that needs a live client: lock names (empty, NULL, LC_NAME_MAX and one
 * more, 10 KB), leases <= 0, bad acquire options, bad command/script/eval arguments and bad
 * multi-lock name lists are LC_EINVAL, leave *out NULL and send nothing to Redis (the database
 * stays empty); valid edge cases (a name of exactly LC_NAME_MAX bytes) work.
 */
#include "lc_test.h"

/* One redis-server and one client for the whole file. */
static int group_setup(void **state)
{
    (void)state;
    return gf_start(NULL, lt_client_opts());
}

/* Keys in db 0: stays 0 when a refused call sent nothing to Redis. */
static long long dbsize(void)
{
    return rf_integer(gf_redis, "DBSIZE");
}

/* A new (malloc) string of len 'n' bytes. */
static char *name_of(size_t len)
{
    char *s = malloc(len + 1);
    assert_non_null(s);
    memset(s, 'n', len);
    s[len] = '\0';
    return s;
}

/* lc_lock_new on the shared client, with *out preset to garbage to see it reset to NULL. */
static lc_status lock_new(const char *name, const lc_lock_opts *o, lc_lock **out)
{
    *out = (lc_lock *)&out;
    return lc_lock_new(gf_client, name, o, out);
}

/* Names: NULL, empty, LC_NAME_MAX + 1 and 10 KB are refused; LC_NAME_MAX bytes works. */
static void test_lock_names(void **state)
{
    (void)state;
    lc_lock *l = NULL;
    assert_status(lock_new(NULL, NULL, &l), LC_EINVAL);
    assert_null(l);
    assert_status(lock_new("", NULL, &l), LC_EINVAL);
    assert_null(l);
    char *over = name_of(LC_NAME_MAX + 1);
    assert_status(lock_new(over, NULL, &l), LC_EINVAL);
    assert_null(l);
    free(over);
    char *big = name_of(10 * 1024);
    assert_status(lock_new(big, NULL, &l), LC_EINVAL);
    assert_null(l);
    assert_status(lc_lock_force_unlock(gf_client, big), LC_EINVAL);
    free(big);
    assert_status(lc_lock_force_unlock(gf_client, ""), LC_EINVAL);
    assert_status(lc_lock_force_unlock(gf_client, NULL), LC_EINVAL);
    assert_status(lc_lock_new(gf_client, "ok", NULL, NULL), LC_EINVAL);
    assert_int_equal(dbsize(), 0);

    char *max = name_of(LC_NAME_MAX);
    assert_ok(lock_new(max, NULL, &l));
    assert_string_equal(lc_lock_name(l), max);
    assert_ok(lc_lock_acquire(l, 0, NULL));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", max), 1);
    assert_ok(lc_lock_release(l));
    lc_lock_free(l);
    free(max);
}

/* lease_ms 0 or negative is LC_EINVAL (from lc_lock_new and from the multi-lock). */
static void test_bad_leases(void **state)
{
    (void)state;
    const int leases[] = {0, -1, -30000};
    const char *names[] = {"it_bad:m1", "it_bad:m2"};
    for (size_t i = 0; i < sizeof leases / sizeof leases[0]; i++) {
        lc_lock_opts o = lt_opts(leases[i], 1);
        lc_lock *l = NULL;
        assert_status(lock_new("it_bad:lease", &o, &l), LC_EINVAL);
        assert_null(l);
        o.watchdog = 0;
        assert_status(lock_new("it_bad:lease", &o, &l), LC_EINVAL);
        assert_null(l);
        lc_multilock *ml = (lc_multilock *)&ml;
        assert_status(lc_multilock_new(gf_client, 2, names, &o, &ml), LC_EINVAL);
        assert_null(ml);
    }
    assert_int_equal(dbsize(), 0);
}

/* Bad acquire / extend arguments on a valid handle: LC_EINVAL and no state change. */
static void test_bad_acquire_args(void **state)
{
    (void)state;
    lc_lock *l = lt_lock(gf_client, "it_bad:acq", 30000, 0);
    assert_status(lc_lock_acquire(l, -1, NULL), LC_EINVAL);
    lc_acquire_opts ao = {.wait_ms = 0, .nread = -1};
    redisReply *values = (redisReply *)&values;
    assert_status(lc_lock_acquire_ex(l, &ao, NULL, &values), LC_EINVAL);
    assert_null(values);
    ao.nread = 2;
    ao.read_keys = NULL;
    values = (redisReply *)&values;
    assert_status(lc_lock_acquire_ex(l, &ao, NULL, &values), LC_EINVAL);
    assert_null(values);
    assert_int_equal(lc_lock_held(l), 0);
    assert_int_equal(dbsize(), 0);

    /* extend with a bad lease on a held lock leaves the lease as it was. */
    assert_ok(lc_lock_acquire(l, 0, NULL));
    assert_status(lc_lock_extend(l, 0), LC_EINVAL);
    assert_status(lc_lock_extend(l, -5), LC_EINVAL);
    assert_true(rf_integer(gf_redis, "PTTL it_bad:acq") > 20000);
    assert_int_equal(lc_lock_held(l), 1);
    assert_ok(lc_lock_release(l));
    lc_lock_free(l);
}

/* A NULL entry in read_keys (lengths not given) is a bad argument, not a crash. */
static void test_null_read_key(void **state)
{
    (void)state;
    lc_lock *l = lt_lock(gf_client, "it_bad:nullkey", 30000, 0);
    const char *keys[] = {"it_bad:k1", NULL};
    lc_acquire_opts ao = {.wait_ms = 0, .nread = 2, .read_keys = keys, .read_keylens = NULL};
    redisReply *values = (redisReply *)&values;
    assert_status(lc_lock_acquire_ex(l, &ao, NULL, &values), LC_EINVAL);
    assert_null(values);
    assert_int_equal(lc_lock_held(l), 0);
    assert_int_equal(dbsize(), 0);
    lc_lock_free(l);
}

/* Bad command, script and eval arguments. */
static void test_bad_command_args(void **state)
{
    (void)state;
    redisReply *r = (redisReply *)&r;
    assert_status(lc_client_command(gf_client, 0, NULL, NULL, &r), LC_EINVAL);
    assert_null(r);
    const char *argv[] = {"PING"};
    assert_status(lc_client_command(gf_client, 0, argv, NULL, NULL), LC_EINVAL);
    assert_status(lc_client_command(gf_client, -1, argv, NULL, NULL), LC_EINVAL);
    assert_status(lc_client_command(gf_client, 1, NULL, NULL, NULL), LC_EINVAL);

    lc_script *s = NULL;
    assert_ok(lc_script_new("return redis.call('SET', KEYS[1], ARGV[1])", &s));
    assert_status(lc_script_run(gf_client, NULL, 0, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    assert_status(lc_script_run(gf_client, s, -1, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    assert_status(lc_script_run(gf_client, s, 1, NULL, NULL, 1, NULL, NULL, NULL), LC_EINVAL);
    const char *keys[] = {"it_bad:k"};
    assert_status(lc_script_run(gf_client, s, 1, keys, NULL, 1, NULL, NULL, NULL), LC_EINVAL);

    lc_script *f = NULL;
    assert_ok(lc_fenced_script_new("return 1", &f));
    lc_lock *l = lt_lock(gf_client, "it_bad:eval", 30000, 0);
    assert_ok(lc_lock_acquire(l, 0, NULL));
    assert_status(lc_lock_eval(l, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    assert_status(lc_lock_eval(l, f, 0, -1, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    assert_status(lc_lock_eval(l, f, 0, 1, NULL, NULL, 0, NULL, NULL, NULL), LC_EINVAL);
    assert_status(lc_lock_eval(l, f, 0, 0, NULL, NULL, 2, NULL, NULL, NULL), LC_EINVAL);
    /* Still held and usable after the refused calls. */
    assert_int_equal(lc_lock_held(l), 1);
    redisReply *reply = NULL;
    assert_ok(lc_lock_eval(l, f, 0, 0, NULL, NULL, 0, NULL, NULL, &reply));
    assert_non_null(reply);
    assert_int_equal(reply->integer, 1);
    freeReplyObject(reply);
    assert_ok(lc_lock_release(l));
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_bad:k"), 0);

    lc_lock_free(l);
    lc_script_free(s);
    lc_script_free(f);
}

/* Multi-lock name lists: empty, NULL, with a NULL/empty/oversized name; NULL out; bad index. */
static void test_bad_multilock_args(void **state)
{
    (void)state;
    lc_multilock *ml = NULL;
    const char *ok[] = {"it_bad:a", "it_bad:b"};
    char *over = name_of(LC_NAME_MAX + 1);
    const char *with_null[] = {"it_bad:a", NULL};
    const char *with_empty[] = {"it_bad:a", ""};
    const char *with_over[] = {"it_bad:a", over};
    struct {
        int n;
        const char *const *names;
    } bad[] = {{0, ok}, {-1, ok}, {2, NULL}, {2, with_null}, {2, with_empty}, {2, with_over}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ml = (lc_multilock *)&ml;
        lc_status st = lc_multilock_new(gf_client, bad[i].n, bad[i].names, NULL, &ml);
        if (st != LC_EINVAL)
            fail_msg("case %zu: %s, expected LC_EINVAL", i, lc_status_name(st));
        assert_null(ml);
    }
    free(over);
    assert_status(lc_multilock_new(gf_client, 2, ok, NULL, NULL), LC_EINVAL);
    assert_int_equal(dbsize(), 0);

    assert_ok(lc_multilock_new(gf_client, 2, ok, NULL, &ml));
    assert_int_equal(lc_multilock_count(ml), 2);
    assert_null(lc_multilock_get(ml, -1));
    assert_null(lc_multilock_get(ml, 2));
    assert_non_null(lc_multilock_get(ml, 1));
    assert_status(lc_multilock_acquire(ml, -1), LC_EINVAL);
    assert_int_equal(dbsize(), 0);
    lc_multilock_free(ml);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_lock_names, gf_flush),
        cmocka_unit_test_setup(test_bad_leases, gf_flush),
        cmocka_unit_test_setup(test_bad_acquire_args, gf_flush),
        cmocka_unit_test_setup(test_bad_command_args, gf_flush),
        cmocka_unit_test_setup(test_bad_multilock_args, gf_flush),
        /* Last: it crashes a library that does not check, which ends a sanitizer build. */
        cmocka_unit_test_setup(test_null_read_key, gf_flush),
    };
    return cmocka_run_group_tests_name("it_badinput", tests, group_setup, gf_group_teardown);
}
