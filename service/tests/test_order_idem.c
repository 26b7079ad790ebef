/*
 * Unit tests of service/src/order/order_idem.c, the Idempotency-Key claim's decisions: what each
 * reply of the claim and takeover scripts (STORE_CLAIM_*, STORE_TAKEOVER_*) makes the order do,
 * a malformed or failed reply never placing an order, and what the claim becomes after each
 * outcome. No Redis: replies are built by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "order_idem.h"
#include "store_scripts.h"

#define ID "0123456789abcdef0123456789abcdef-3-sku-a"

/* An array reply: integers and strings as given ("s:" prefix: a string). */
struct arr {
    redisReply top, el[5];
    redisReply *elems[5];
};

static const redisReply *arr(struct arr *a, int n, const char *const *items)
{
    memset(a, 0, sizeof(*a));
    for (int i = 0; i < n; i++) {
        if (strncmp(items[i], "s:", 2) == 0) {
            a->el[i].type = REDIS_REPLY_STRING;
            a->el[i].str = (char *)items[i] + 2;
            a->el[i].len = strlen(items[i] + 2);
        } else {
            a->el[i].type = REDIS_REPLY_INTEGER;
            a->el[i].integer = atoll(items[i]);
        }
        a->elems[i] = &a->el[i];
    }
    a->top.type = REDIS_REPLY_ARRAY;
    a->top.elements = (size_t)n;
    a->top.element = a->elems;
    return &a->top;
}

#define ARR(a, ...)                                                                                \
    arr((a), (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)),                        \
        (const char *[]){__VA_ARGS__})

static enum idem_step claim(lc_status st, const redisReply *r, struct idem_verdict *v)
{
    order_idem_claim_verdict(st, r, 1024, v);
    return v->step;
}

static void test_claim_owned(void **state)
{
    (void)state;
    struct arr a;
    struct idem_verdict v;
    assert_int_equal(claim(LC_OK, ARR(&a, "1", "s:pending:99:tok", "99"), &v), IDEM_OWNED);
    /* no expiry, or no value: malformed, never owned */
    assert_int_equal(claim(LC_OK, ARR(&a, "1", "s:pending:99:tok"), &v), IDEM_UNAVAILABLE);
    assert_int_equal(claim(LC_OK, ARR(&a, "1", "99", "99"), &v), IDEM_UNAVAILABLE);
}

static void test_claim_failed_or_malformed(void **state)
{
    (void)state;
    struct arr a;
    struct idem_verdict v;
    assert_int_equal(claim(LC_EIO, ARR(&a, "1", "s:x", "9"), &v), IDEM_UNAVAILABLE);
    assert_int_equal(claim(LC_OK, NULL, &v), IDEM_UNAVAILABLE);
    assert_int_equal(claim(LC_OK, ARR(&a, "1"), &v), IDEM_UNAVAILABLE);
    redisReply err = {.type = REDIS_REPLY_ERROR};
    assert_int_equal(claim(LC_OK, &err, &v), IDEM_UNAVAILABLE);
}

static void test_claim_taken(void **state)
{
    (void)state;
    struct arr a;
    struct idem_verdict v;
    assert_int_equal(claim(LC_OK, ARR(&a, "0", "s:" ID), &v), IDEM_REPLAY);
    assert_int_equal(v.k, 3);
    assert_string_equal(v.sku, "sku-a");
    /* not an order id (written by hand, or damaged): nothing to replay, take it over */
    assert_int_equal(claim(LC_OK, ARR(&a, "0", "s:garbage"), &v), IDEM_TAKEOVER);
    assert_int_equal(claim(LC_OK, ARR(&a, "0", "s:pending:99:tok"), &v), IDEM_PENDING);
}

static void test_claim_expired(void **state)
{
    (void)state;
    struct arr a;
    struct idem_verdict v;
    assert_int_equal(claim(LC_OK, ARR(&a, "2", "s:pending:1:t", "3", "5"), &v), IDEM_FIND);
    assert_int_equal(v.nseg, 5); /* the high-water mark: keys may exist up to it */
    assert_int_equal(claim(LC_OK, ARR(&a, "2", "s:pending:1:t", "4", "0"), &v), IDEM_FIND);
    assert_int_equal(v.nseg, 4);
    assert_int_equal(claim(LC_OK, ARR(&a, "2", "s:pending:1:t", "0", "0"), &v), IDEM_TAKEOVER);
    assert_int_equal(claim(LC_OK, ARR(&a, "2", "s:pending:1:t", "1025", "0"), &v),
                     IDEM_UNAVAILABLE);
    assert_int_equal(claim(LC_OK, ARR(&a, "2", "s:pending:1:t", "-1", "0"), &v),
                     IDEM_TAKEOVER); /* max(-1, 0) = 0 */
    assert_int_equal(claim(LC_OK, ARR(&a, "2", "s:pending:1:t", "3"), &v), IDEM_UNAVAILABLE);
}

/* A ticket's claim (docs/design.md "The ticket and the order"): used by another request, or
 * past the ticket's expiry, is the answer; a made claim of the same key replays the id it
 * names (the value as stored, "<id> <key hex>", comes third). */
static void test_claim_ticket(void **state)
{
    (void)state;
    struct arr a;
    struct idem_verdict v;
    assert_int_equal(claim(LC_OK, ARR(&a, "3", "s:pending:99:tok.6b31"), &v), IDEM_TICKET_USED);
    assert_int_equal(claim(LC_OK, ARR(&a, "3", "s:" ID " 6b31"), &v), IDEM_TICKET_USED);
    assert_int_equal(claim(LC_OK, ARR(&a, "4", "s:"), &v), IDEM_TICKET_EXPIRED);
    assert_int_equal(claim(LC_OK, ARR(&a, "0", "s:" ID, "s:" ID " 6b31"), &v), IDEM_REPLAY);
    assert_int_equal(v.k, 3);
    assert_int_equal(order_idem_takeover_verdict(LC_OK, ARR(&a, "3")), IDEM_TICKET_EXPIRED);
    assert_int_equal(order_idem_final(OUT_TICKET_USED), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_TICKET_RECLAIM), IDEM_FINAL_DELETE);
}

static void test_takeover(void **state)
{
    (void)state;
    struct arr a;
    assert_int_equal(order_idem_takeover_verdict(LC_OK, ARR(&a, "2", "s:pending:9:t", "9")),
                     IDEM_OWNED);
    assert_int_equal(order_idem_takeover_verdict(LC_OK, ARR(&a, "2", "s:pending:9:t")),
                     IDEM_UNAVAILABLE);
    assert_int_equal(order_idem_takeover_verdict(LC_OK, ARR(&a, "0")), IDEM_CLAIM);
    assert_int_equal(order_idem_takeover_verdict(LC_OK, ARR(&a, "1", "s:" ID)), IDEM_CLAIM);
    assert_int_equal(order_idem_takeover_verdict(LC_ETIMEOUT, ARR(&a, "2", "s:p", "9")),
                     IDEM_UNAVAILABLE);
    assert_int_equal(order_idem_takeover_verdict(LC_OK, NULL), IDEM_UNAVAILABLE);
}

static void test_final(void **state)
{
    (void)state;
    assert_int_equal(order_idem_final(OUT_CREATED), IDEM_FINAL_ORDER);
    /* the outcome may be an order: the claim stays pending, a replay recovers it */
    assert_int_equal(order_idem_final(OUT_OUTCOME_UNKNOWN), IDEM_FINAL_LEAVE);
    assert_int_equal(order_idem_final(OUT_UNAVAILABLE), IDEM_FINAL_LEAVE);
    assert_int_equal(order_idem_final(OUT_SOLD_OUT), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_INSUFFICIENT), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_LOCK_TIMEOUT), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_OVER_BUDGET), IDEM_FINAL_DELETE);
    /* the sale rules refuse before anything is written */
    assert_int_equal(order_idem_final(OUT_LIMIT), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_NOT_STARTED), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_ENDED), IDEM_FINAL_DELETE);
    assert_int_equal(order_idem_final(OUT_USER_REQUIRED), IDEM_FINAL_DELETE);
}

/* The codes are the ones the scripts' text returns (one definition for C and Lua). */
static void test_codes_in_lua(void **state)
{
    (void)state;
    assert_non_null(strstr(STORE_LUA_IDEM_CLAIM, "return {1, v, exp}"));
    assert_non_null(strstr(STORE_LUA_IDEM_CLAIM, "return {0, v}"));
    assert_non_null(strstr(STORE_LUA_IDEM_CLAIM, "return {2, v,"));
    assert_non_null(strstr(STORE_LUA_IDEM_TAKEOVER, "return {0}"));
    assert_non_null(strstr(STORE_LUA_IDEM_TAKEOVER, "return {1, ARGV[2]}"));
    assert_non_null(strstr(STORE_LUA_IDEM_TAKEOVER, "return {2, v, exp}"));
    assert_non_null(strstr(STORE_LUA_IDEM_CLAIM, "return {3, v}"));
    assert_non_null(strstr(STORE_LUA_IDEM_CLAIM, "return {4, ''}"));
    assert_non_null(strstr(STORE_LUA_IDEM_TAKEOVER, "return {3}"));
    assert_non_null(strstr(STORE_LUA_CANCEL, "return {(-1), redis.call('HGET'"));
    assert_non_null(strstr(STORE_LUA_CANCEL, "return {0}"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_owned),  cmocka_unit_test(test_claim_failed_or_malformed),
        cmocka_unit_test(test_claim_taken),  cmocka_unit_test(test_claim_expired),
        cmocka_unit_test(test_claim_ticket), cmocka_unit_test(test_takeover),
        cmocka_unit_test(test_final),        cmocka_unit_test(test_codes_in_lua),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
