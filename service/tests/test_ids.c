/*
 * Unit tests of service/src/base/ids.c and of the order id format it feeds (order_id_parse): ids
 * carry 128 bits from getrandom, so no id tells anything about another (issue #10: ids from
 * xorshift64* gave away the generator's state, and GET /api/v1/orders/{id} needs no token).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ids.h"
#include "order.h"

#define N 4096

static int cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void test_format_and_uniqueness(void **state)
{
    (void)state;
    static char ids[N][IDS_ORDER_HEX + 1];
    unsigned long ones = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(ids_order_token(ids[i], sizeof(ids[i])), 0);
        assert_int_equal(strlen(ids[i]), IDS_ORDER_HEX);
        for (int j = 0; j < IDS_ORDER_HEX; j++) {
            char c = ids[i][j];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                fail_msg("id %s: not lower-case hex", ids[i]);
            int v = c <= '9' ? c - '0' : c - 'a' + 10;
            ones += (unsigned long)__builtin_popcount((unsigned)v);
        }
    }
    qsort(ids, N, sizeof(ids[0]), cmp);
    for (int i = 1; i < N; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            fail_msg("duplicate id %s", ids[i]);
    /* 524288 random bits: the share of ones is 0.5 +- 0.0007 (1 sigma); a generator stuck on
     * part of its output (or an all-zero buffer) is far outside 0.49..0.51. */
    double share = (double)ones / ((double)N * IDS_ORDER_BITS);
    if (share < 0.49 || share > 0.51)
        fail_msg("share of one bits %.4f", share);
    assert_true(IDS_ORDER_BITS >= 96);
}

static void test_small_buffer(void **state)
{
    (void)state;
    char small[IDS_ORDER_HEX] = "x";
    assert_int_equal(ids_order_token(small, sizeof(small)), -1);
    assert_string_equal(small, "");
    assert_int_equal(ids_order_token(NULL, 0), -1);
}

static void *per_thread(void *arg)
{
    char *out = arg;
    return (void *)(long)ids_order_token(out, IDS_ORDER_HEX + 1);
}

/* Each thread has its own buffer: two threads never hand out the same bytes. */
static void test_threads(void **state)
{
    (void)state;
    enum { T = 8 };
    pthread_t th[T];
    char out[T][IDS_ORDER_HEX + 1];
    for (int i = 0; i < T; i++)
        assert_int_equal(pthread_create(&th[i], NULL, per_thread, out[i]), 0);
    for (int i = 0; i < T; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        assert_int_equal((long)rc, 0);
    }
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            assert_string_not_equal(out[i], out[j]);
}

/* Order ids are "<32 hex>-<segment>-<sku>"; the old 16-digit form is no longer an id. */
static void test_order_id_parse(void **state)
{
    (void)state;
    char sku[80];
    int k = -1;
    char id[ORDER_ID_MAX + 1];
    char hex[IDS_ORDER_HEX + 1];
    assert_int_equal(ids_order_token(hex, sizeof(hex)), 0);
    snprintf(id, sizeof(id), "%s-12-demo-sku", hex);
    assert_int_equal(order_id_parse(id, strlen(id), &k, sku), 0);
    assert_int_equal(k, 12);
    assert_string_equal(sku, "demo-sku");

    /* The longest: a 64-character SKU in segment 1023. */
    char longsku[65];
    memset(longsku, 'S', 64);
    longsku[64] = '\0';
    snprintf(id, sizeof(id), "%s-1023-%s", hex, longsku);
    assert_int_equal(strlen(id), ORDER_ID_MAX);
    assert_int_equal(order_id_parse(id, strlen(id), &k, sku), 0);
    assert_int_equal(k, 1023);

    const char *bad[] = {
        "0123456789abcdef-0-sku",                  /* the old, guessable form */
        "0123456789abcdef0123456789abcde-0-sku",   /* 31 digits */
        "0123456789ABCDEF0123456789abcdef-0-sku",  /* upper case */
        "0123456789abcdef0123456789abcdef0-0-sku", /* 33 digits */
        "0123456789abcdef0123456789abcdef-01-sku", /* leading zero */
        "0123456789abcdef0123456789abcdef-0-",     /* no sku */
        "0123456789abcdef0123456789abcdef--sku",   /* no segment */
        "0123456789abcdef0123456789abcdef-0-a{b}", /* bad sku */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (order_id_parse(bad[i], strlen(bad[i]), &k, sku) == 0)
            fail_msg("accepted %s", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_and_uniqueness),
        cmocka_unit_test(test_small_buffer),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_order_id_parse),
    };
    return cmocka_run_group_tests_name("ids", tests, NULL, NULL);
}
