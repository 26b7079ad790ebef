/*
 * The items text of a cart's order log entries (service/src/store/orderlog.c, orderlog.h):
 * orderlog_items_add builds "<sku>:<k>:<q>,..." part by part and refuses a part it cannot
 * spell or a text past ORDERLOG_ITEMS_MAX with the text unchanged; orderlog_items_next reads
 * it back, a SKU holding ':' included, and refuses what is not the format. Takes milliseconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "orderlog.h"
#include "store_scripts.h"

static void test_build_and_read_back(void **state)
{
    (void)state;
    char buf[ORDERLOG_ITEMS_MAX + 1] = "";
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "shoe", 2, 1), 0);
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "bag:9", 0, 3), 0); /* ':' in a SKU */
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "bag:9", 5, 12), 0);
    assert_string_equal(buf, "shoe:2:1,bag:9:0:3,bag:9:5:12");
    const char *pos = buf;
    char sku[65];
    int k;
    long long q;
    static const struct {
        const char *sku;
        int k;
        long long q;
    } want[] = {{"shoe", 2, 1}, {"bag:9", 0, 3}, {"bag:9", 5, 12}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(orderlog_items_next(&pos, sku, sizeof sku, &k, &q), 1);
        assert_string_equal(sku, want[i].sku);
        assert_int_equal(k, want[i].k);
        assert_int_equal(q, want[i].q);
    }
    assert_int_equal(orderlog_items_next(&pos, sku, sizeof sku, &k, &q), 0);
    pos = "";
    assert_int_equal(orderlog_items_next(&pos, sku, sizeof sku, &k, &q), 0);
}

static void test_bad_parts_are_refused(void **state)
{
    (void)state;
    char buf[64] = "a:0:1";
    /* a part no order can have: buf unchanged */
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "", 0, 1), -1);
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "x,y", 0, 1), -1);
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "x", -1, 1), -1);
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "x", STORE_SEGMENTS_MAX, 1), -1);
    assert_int_equal(orderlog_items_add(buf, sizeof buf, "x", 0, 0), -1);
    assert_string_equal(buf, "a:0:1");
    /* past the buffer: refused, unchanged */
    char small[12] = "a:0:1";
    assert_int_equal(orderlog_items_add(small, sizeof small, "bb", 1, 2), -1);
    assert_int_equal(orderlog_items_add(small, sizeof small, "b", 1, 2), 0); /* 11 bytes */
    assert_string_equal(small, "a:0:1,b:1:2");
    /* past ORDERLOG_ITEMS_MAX however large the buffer: refused at the part that would pass */
    static char big[ORDERLOG_ITEMS_MAX * 2];
    big[0] = '\0';
    int parts = 0;
    while (orderlog_items_add(big, sizeof big, "sku-0123456789", parts % 1000, 7) == 0)
        parts++;
    assert_true(strlen(big) <= ORDERLOG_ITEMS_MAX && strlen(big) > ORDERLOG_ITEMS_MAX - 24);
    fprintf(stderr, "# %d parts of a 14-byte SKU fit in ORDERLOG_ITEMS_MAX\n", parts);
    static const char *const bad[] = {"a:0:1,",   ",a:0:1",  "a:0:1,,b:0:1", "a:0",    "a::1",
                                      "a:0:0",    ":0:1",    "a:x:1",        "a:0:1x", "a:-1:1",
                                      "a:1024:1", "a/b:0:1", "a:0:+1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *pos = bad[i];
        char sku[65];
        int k, r;
        long long q;
        while ((r = orderlog_items_next(&pos, sku, sizeof sku, &k, &q)) == 1)
            ;
        if (r != -1)
            fail_msg("\"%s\" read as the format", bad[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_and_read_back),
        cmocka_unit_test(test_bad_parts_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
