/*
 * Unit tests of fence.c (no server): what a token-fenced script's reply means (lc_token_reply,
 * and the seen token a refusal carries: lc_token_reply_seen), the C token rule (lc_fence_newer),
 * and the mysql:// URL parser (mysql_url.c) that the MySQL backend and inventory-sink share.
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

static redisReply *str_reply(const char *s)
{
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_STRING;
    r->str = (char *)s;
    r->len = strlen(s);
    return r;
}

/* The refusal {0, seen}: seen read exactly past 2^53; anything else (a success, an older
 * guard's {0}, a seen token that is not a uint64) is 0. */
static void test_token_reply_seen(void **state)
{
    (void)state;
    redisReply *zero = int_reply(0), *one = int_reply(1);
    redisReply *big = str_reply("18446744073709551615"), *over = str_reply("18446744073709551616");
    redisReply *odd = str_reply("12a"), *epoch = str_reply("8589934597");
    redisReply *e_big[2] = {zero, big}, *e_over[2] = {zero, over}, *e_odd[2] = {zero, odd};
    redisReply *e_epoch[2] = {zero, epoch}, *e_ran[2] = {one, epoch}, *e_old[1] = {zero};
    redisReply *r_big = array_reply(2, e_big), *r_over = array_reply(2, e_over);
    redisReply *r_odd = array_reply(2, e_odd), *r_epoch = array_reply(2, e_epoch);
    redisReply *r_ran = array_reply(2, e_ran), *r_old = array_reply(1, e_old);
    assert_true(lc_token_reply_seen(r_big) == UINT64_MAX);
    assert_true(lc_token_reply_seen(r_epoch) == (2ULL << 32) + 5);
    assert_true(lc_token_reply_seen(r_over) == 0);
    assert_true(lc_token_reply_seen(r_odd) == 0);
    assert_true(lc_token_reply_seen(r_ran) == 0);
    assert_true(lc_token_reply_seen(r_old) == 0);
    assert_true(lc_token_reply_seen(NULL) == 0);
    redisReply *all[] = {zero,  one,    big,   over,    odd,   epoch,
                         r_big, r_over, r_odd, r_epoch, r_ran, r_old};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
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
        cmocka_unit_test(test_token_reply_seen),
        cmocka_unit_test(test_mysql_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
