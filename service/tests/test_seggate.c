/*
 * Unit tests of service/src/order/seggate.c, a worker loop's per-segment gates: first come first
 * served, a waiter taken out of the middle of a queue is never handed the gate, a gate with no
 * owner is free (and busy again only once entered), and SKUs and segments do not share gates.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "seggate.h"

static void test_fifo_handover(void **state)
{
    (void)state;
    struct seggate *g = seggate_new();
    assert_non_null(g);
    assert_false(seggate_busy(g, "a", 3));
    assert_int_equal(seggate_enter(g, "a", 3), 0);
    assert_true(seggate_busy(g, "a", 3));
    assert_int_equal(seggate_enter(g, "a", 3), -1); /* owned: a second owner is refused */
    struct seggate_waiter w[4];
    for (int i = 0; i < 4; i++) {
        w[i].owner = &w[i];
        seggate_queue(g, "a", 3, &w[i]);
    }
    assert_int_equal(seggate_queued(g, "a", 3), 4);
    seggate_unqueue(g, "a", 3, &w[1]); /* its deadline passed */
    seggate_unqueue(g, "a", 3, &w[1]); /* twice: harmless */
    assert_int_equal(seggate_queued(g, "a", 3), 3);
    assert_ptr_equal(seggate_leave(g, "a", 3), &w[0]);
    assert_true(seggate_busy(g, "a", 3)); /* w[0] owns it now */
    assert_ptr_equal(seggate_leave(g, "a", 3), &w[2]);
    assert_ptr_equal(seggate_leave(g, "a", 3), &w[3]);
    assert_int_equal(seggate_queued(g, "a", 3), 0);
    assert_null(seggate_leave(g, "a", 3));
    assert_false(seggate_busy(g, "a", 3));
    assert_null(seggate_leave(g, "a", 3)); /* leaving a free gate: nothing */
    seggate_free(g);
}

static void test_unqueue_ends_of_queue(void **state)
{
    (void)state;
    struct seggate *g = seggate_new();
    struct seggate_waiter w[3];
    assert_int_equal(seggate_enter(g, "s", 0), 0);
    for (int i = 0; i < 3; i++)
        seggate_queue(g, "s", 0, &w[i]);
    seggate_unqueue(g, "s", 0, &w[0]); /* the head */
    seggate_unqueue(g, "s", 0, &w[2]); /* the tail */
    assert_int_equal(seggate_queued(g, "s", 0), 1);
    struct seggate_waiter x;
    seggate_queue(g, "s", 0, &x); /* queued after the tail went: behind w[1] */
    assert_ptr_equal(seggate_leave(g, "s", 0), &w[1]);
    assert_ptr_equal(seggate_leave(g, "s", 0), &x);
    assert_null(seggate_leave(g, "s", 0));
    seggate_free(g);
}

static void test_keys_are_separate(void **state)
{
    (void)state;
    struct seggate *g = seggate_new();
    /* Many gates at once, more than the buckets, some sharing a bucket. */
    char sku[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(sku, sizeof(sku), "sku-%d", i % 300);
        assert_int_equal(seggate_enter(g, sku, i / 300), 0);
    }
    for (int i = 0; i < 3000; i++) {
        snprintf(sku, sizeof(sku), "sku-%d", i % 300);
        assert_true(seggate_busy(g, sku, i / 300));
        assert_false(seggate_busy(g, sku, 10 + i / 300));
    }
    assert_false(seggate_busy(g, "sku-1", -1));
    assert_false(seggate_busy(g, "sku-1x", 0));
    for (int i = 0; i < 3000; i += 2) {
        snprintf(sku, sizeof(sku), "sku-%d", i % 300);
        assert_null(seggate_leave(g, sku, i / 300));
    }
    for (int i = 0; i < 3000; i++) {
        snprintf(sku, sizeof(sku), "sku-%d", i % 300);
        assert_int_equal(seggate_busy(g, sku, i / 300), i % 2 == 1);
    }
    seggate_free(g); /* frees the gates still owned */
}

/* Busy-elsewhere hints: run for their length, double while the segment stays busy (found busy
 * again within the cap of its end), stop at the cap, end on clear, start over after a quiet
 * spell, and are per (SKU, segment). */
static void test_busy_hints(void **state)
{
    (void)state;
    struct seggate *g = seggate_new();
    assert_false(seggate_hinted_busy(g, "a", 1, 1000));
    seggate_hint_busy(g, "a", 1, 1000, 2, 20);
    assert_true(seggate_hinted_busy(g, "a", 1, 1000));
    assert_true(seggate_hinted_busy(g, "a", 1, 1001));
    assert_false(seggate_hinted_busy(g, "a", 1, 1002)); /* ran out */
    assert_false(seggate_hinted_busy(g, "a", 2, 1000)); /* another segment */
    assert_false(seggate_hinted_busy(g, "b", 1, 1000)); /* another SKU */
    /* Busy again right after: 4, 8, 16, then the cap 20. */
    int64_t now = 1002;
    int want[] = {4, 8, 16, 20, 20};
    for (int i = 0; i < 5; i++) {
        seggate_hint_busy(g, "a", 1, now, 2, 20);
        assert_true(seggate_hinted_busy(g, "a", 1, now + want[i] - 1));
        assert_false(seggate_hinted_busy(g, "a", 1, now + want[i]));
        now += want[i];
    }
    /* Cleared: over at once; the next busy find starts at the base again. */
    seggate_hint_clear(g, "a", 1);
    assert_false(seggate_hinted_busy(g, "a", 1, now - 1));
    seggate_hint_busy(g, "a", 1, now, 2, 20);
    assert_false(seggate_hinted_busy(g, "a", 1, now + 2));
    /* Found busy again 10 ms after the hint's end (a slow loop): the same spell, doubled. */
    seggate_hint_busy(g, "a", 1, now + 12, 2, 20);
    assert_true(seggate_hinted_busy(g, "a", 1, now + 15));
    assert_false(seggate_hinted_busy(g, "a", 1, now + 16));
    /* A quiet spell longer than the cap after the hint's end: the base again. */
    seggate_hint_busy(g, "a", 1, now + 40, 2, 20);
    assert_true(seggate_hinted_busy(g, "a", 1, now + 41));
    assert_false(seggate_hinted_busy(g, "a", 1, now + 42));
    /* Clearing a hint that is not there is harmless, and a colliding key only replaces it. */
    seggate_hint_clear(g, "zz", 9);
    char sku[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(sku, sizeof(sku), "s%d", i);
        seggate_hint_busy(g, sku, i % 7, 5000, 3, 20);
    }
    int live = 0;
    for (int i = 0; i < 2000; i++) {
        snprintf(sku, sizeof(sku), "s%d", i);
        live += seggate_hinted_busy(g, sku, i % 7, 5001);
        assert_false(seggate_hinted_busy(g, sku, i % 7 + 1, 5001));
    }
    assert_true(live > 0 && live <= 256); /* a bounded table: at most one hint per slot */
    seggate_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_handover),
        cmocka_unit_test(test_unqueue_ends_of_queue),
        cmocka_unit_test(test_keys_are_separate),
        cmocka_unit_test(test_busy_hints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
