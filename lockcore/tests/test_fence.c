/*
 * Unit tests of fence.c (no server): what a token-fenced script's reply means (lc_token_reply),
 * the C token rule (lc_fence_newer), and the mysql:// URL parser (mysql_url.c) that the MySQL
 * backend and inventory-sink share.
 */
#include "lc_test.h"

#include "lockcore/lockcore_mysql.h"

static redisReply *int_reply(long long v)
{
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

static redisReply *array_reply(size_t n, redisReply **els)
{
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_ARRAY;
    r->elements = n;
    r->element = els;
    return r;
}

static void test_token_reply(void **state)
{
    (void)state;
    const redisReply *body = (const redisReply *)1;
    assert_int_equal(lc_token_reply(NULL, &body), LC_EREDIS);
    assert_null(body);
    redisReply *one = int_reply(1), *zero = int_reply(0), *val = int_reply(42);
    assert_int_equal(lc_token_reply(one, &body), LC_EREDIS); /* not an array */
    redisReply *e0[1] = {zero};
    redisReply *refused = array_reply(1, e0);
    assert_int_equal(lc_token_reply(refused, &body), LC_ELOST);
    assert_null(body);
    redisReply *e1[2] = {one, val};
    redisReply *ran = array_reply(2, e1);
    assert_int_equal(lc_token_reply(ran, &body), LC_OK);
    assert_ptr_equal(body, val);
    redisReply *nothing = array_reply(1, e1); /* {1}: the body returned nil */
    assert_int_equal(lc_token_reply(nothing, &body), LC_OK);
    assert_null(body);
    redisReply *e2[1] = {refused};
    redisReply *odd = array_reply(1, e2);
    assert_int_equal(lc_token_reply(odd, &body), LC_EREDIS);
    redisReply *empty = array_reply(0, NULL);
    assert_int_equal(lc_token_reply(empty, &body), LC_EREDIS);
    assert_true(lc_fence_newer(5, 5));
    assert_false(lc_fence_newer(4, 5));
    free(one);
    free(zero);
    free(val);
    free(refused);
    free(ran);
    free(nothing);
    free(odd);
    free(empty);
}

static void test_mysql_url(void **state)
{
    (void)state;
    lc_mysql_url u;
    char err[128];
    assert_int_equal(lc_mysql_url_parse("mysql://a%40b:p%3Aw@[::1]:3307/db_1", &u, err, sizeof err),
                     LC_OK);
    assert_string_equal(u.user, "a@b");
    assert_string_equal(u.password, "p:w");
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 3307);
    assert_string_equal(u.database, "db_1");
    assert_int_equal(lc_mysql_url_parse("mysql://u@h/d", &u, err, sizeof err), LC_OK);
    assert_int_equal(u.port, 3306);
    assert_string_equal(u.password, "");
    static const char *const bad[] = {"",
                                      "mysql://",
                                      "redis://u@h/d",
                                      "mysql://u@h",
                                      "mysql://@h/d",
                                      "mysql://u@/d",
                                      "mysql://u@h:0/d",
                                      "mysql://u@h:70000/d",
                                      "mysql://u@h:1x/d",
                                      "mysql://u@h/",
                                      "mysql://u@h/d-b",
                                      "mysql://u:%4@h/d",
                                      "mysql://u:%zz@h/d",
                                      "mysql://u@[::1/d"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (lc_mysql_url_parse(bad[i], &u, err, sizeof err) != LC_EINVAL || err[0] == '\0')
            fail_msg("%s: accepted or no reason", bad[i]);
    }
    assert_int_equal(lc_mysql_url_parse(NULL, &u, NULL, 0), LC_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_reply),
        cmocka_unit_test(test_mysql_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
