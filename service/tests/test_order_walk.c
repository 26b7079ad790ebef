/*
 * Unit tests of service/src/order/order_walk.c, the order path's pure decisions: how one walk's
 * segment results add up to an answer, what ends a round, what an acquire's reads and a commit
 * script's reply (STORE_COMMIT_*) come to, what a segment at another version means (the
 * healing rules), and the single-lock strategy's end. No Redis: replies are built by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "order_walk.h"
#include "store_scripts.h"

/* A reply {code, value} as the commit script sends it. */
struct pair {
    redisReply top, code, value;
    redisReply *elems[2];
};

static const redisReply *pair(struct pair *p, long long code, long long value)
{
    memset(p, 0, sizeof(*p));
    p->code.type = p->value.type = REDIS_REPLY_INTEGER;
    p->code.integer = code;
    p->value.integer = value;
    p->elems[0] = &p->code;
    p->elems[1] = &p->value;
    p->top.type = REDIS_REPLY_ARRAY;
    p->top.elements = 2;
    p->top.element = p->elems;
    return &p->top;
}

static void test_note_files_each_result(void **state)
{
    (void)state;
    struct walk w = {0};
    assert_int_equal(order_walk_note(&w, 3, SEG_BUSY), 0);
    assert_int_equal(order_walk_note(&w, 3, SEG_BUSY), 0); /* counted once */
    assert_int_equal(w.nbusy, 1);
    assert_int_equal(order_walk_note(&w, 4, SEG_NOTREADY), 0);
    assert_true(w.retry && w.notready);
    assert_int_equal(order_walk_note(&w, 5, SEG_EMPTY), 1);
    assert_int_equal(order_walk_note(&w, 70, SEG_SHORT), 1);
    assert_true(w.any_short);
    assert_false(w.any_error);
    assert_true((w.done[0] >> 5) & 1);
    assert_true((w.done[1] >> (70 - 64)) & 1);
    assert_false((w.done[0] >> 3) & 1); /* busy is not done: it is waited for */
    struct walk lost = {0};
    assert_int_equal(order_walk_note(&lost, 1, SEG_LOST), 1);
    assert_true(lost.retry);
    assert_false(lost.notready);
    assert_int_equal(lost.done[0], 0); /* a lost lock is come back to */
    assert_int_equal(order_walk_note(&lost, 2, SEG_ERROR), 1);
    assert_true(lost.any_error && ((lost.done[0] >> 2) & 1));
    assert_int_equal(order_walk_note(&lost, 2, SEG_DONE), 0); /* settles: not filed */
}

static void test_end_answers(void **state)
{
    (void)state;
    struct walk w = {0};
    assert_int_equal(order_walk_end(&w, 0), OUT_SOLD_OUT);
    assert_int_equal(order_walk_end(&w, 1), OUT_LOCK_TIMEOUT);
    w.any_short = 1;
    assert_int_equal(order_walk_end(&w, 0), OUT_INSUFFICIENT);
    w.retry = 1; /* a segment not ready or lost is never "sold out" */
    assert_int_equal(order_walk_end(&w, 0), OUT_LOCK_TIMEOUT);
    w.retry = 0;
    order_walk_busy(&w, 9);
    assert_int_equal(order_walk_end(&w, 0), OUT_LOCK_TIMEOUT);
    w.any_error = 1; /* a Redis error is never sold out nor a timeout */
    assert_int_equal(order_walk_end(&w, 0), OUT_UNAVAILABLE);
    assert_int_equal(order_walk_end(&w, 1), OUT_UNAVAILABLE);
}

static void test_busy_nth_across_words(void **state)
{
    (void)state;
    struct walk w = {0};
    int ks[] = {3, 63, 64, 700, SKUCACHE_MAX_SEGMENTS - 1};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        order_walk_busy(&w, ks[i]);
    assert_int_equal(w.nbusy, 5);
    for (int n = 0; n < 5; n++)
        assert_int_equal(order_walk_busy_nth(&w, n), ks[n]);
}

static void test_round_end(void **state)
{
    (void)state;
    struct walk w = {0};
    assert_int_equal(order_walk_round_end(&w, 1, 100, 0), RE_RELOAD);
    assert_int_equal(order_walk_round_end(&w, 0, 100, 0), RE_ANSWER);
    assert_int_equal(order_walk_round_end(&w, 0, -5, 0), RE_ANSWER); /* nothing to wait for */
    w.retry = 1;
    assert_int_equal(order_walk_round_end(&w, 0, 0, 0), RE_TIMEOUT);
    assert_int_equal(order_walk_round_end(&w, 0, 100, 0), RE_AGAIN); /* a lost lock */
    w.notready = 1;
    assert_int_equal(order_walk_round_end(&w, 0, 100, 0), RE_SETTLE);
    assert_int_equal(order_walk_round_end(&w, 0, 100, 1), RE_PAUSE);
    order_walk_busy(&w, 2);
    assert_int_equal(order_walk_round_end(&w, 0, 100, 1), RE_WAIT); /* busy beats not ready */
    assert_int_equal(order_walk_round_end(&w, 1, 100, 1), RE_RELOAD);
}

static void test_acquire_verdict(void **state)
{
    (void)state;
    struct seg_verdict v;
    order_walk_acquire_verdict(10, 7, 7, 10, &v); /* exactly enough */
    assert_int_equal(v.r, SEG_DONE);
    assert_false(v.differs || v.empty);
    order_walk_acquire_verdict(3, 7, 7, 10, &v);
    assert_int_equal(v.r, SEG_SHORT);
    assert_false(v.empty);
    order_walk_acquire_verdict(0, 7, 7, 1, &v);
    assert_int_equal(v.r, SEG_EMPTY);
    assert_true(v.empty);
    order_walk_acquire_verdict(-2, 7, 7, 1, &v);
    assert_int_equal(v.r, SEG_EMPTY);
    order_walk_acquire_verdict(100, 0, 7, 1, &v); /* no version at all: not the order's */
    assert_true(v.differs);
    assert_int_equal(v.sver, 0);
    order_walk_acquire_verdict(100, 9, 7, 1, &v);
    assert_true(v.differs);
    assert_int_equal(v.sver, 9);
}

static void test_commit_verdict(void **state)
{
    (void)state;
    struct pair p;
    struct seg_verdict v;
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_OK, 4), &v);
    assert_int_equal(v.r, SEG_DONE);
    assert_false(v.empty || v.differs || v.damaged);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_OK, 0), &v); /* the last units */
    assert_int_equal(v.r, SEG_DONE);
    assert_true(v.empty);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_SHORT, 2), &v);
    assert_int_equal(v.r, SEG_SHORT);
    assert_false(v.empty);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_SHORT, 0), &v);
    assert_int_equal(v.r, SEG_EMPTY);
    assert_true(v.empty);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_VERSION, 12), &v);
    assert_true(v.differs);
    assert_int_equal(v.sver, 12);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_EXPIRED, 0), &v);
    assert_int_equal(v.r, SEG_EXPIRED);
    assert_false(v.differs);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_DAMAGED, 0), &v);
    assert_int_equal(v.r, SEG_ERROR);
    assert_true(v.damaged);
    /* the sale window, judged by the commit on Redis's clock: the order ends there */
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_NOT_STARTED, 1795600000000LL), &v);
    assert_int_equal(v.r, SEG_NOT_STARTED);
    assert_false(v.differs);
    assert_int_equal(v.at, 1795600000000LL);
    assert_true(order_walk_settles(v.r));
    assert_int_equal(order_walk_settled_outcome(v.r), OUT_NOT_STARTED);
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_ENDED, 1795600000001LL), &v);
    assert_int_equal(v.r, SEG_ENDED);
    assert_int_equal(v.at, 1795600000001LL);
    assert_true(order_walk_settles(v.r));
    assert_int_equal(order_walk_settled_outcome(v.r), OUT_ENDED);
    /* older sale rules than the segment took from a PATCH: re-read them, as a stale layout */
    order_walk_commit_verdict(pair(&p, STORE_COMMIT_RULES, 1795600000000123LL), &v);
    assert_int_equal(v.r, SEG_STALE);
    assert_true(v.rules);
    assert_false(v.differs);
    assert_int_equal(v.at, 1795600000000123LL);
    assert_false(order_walk_settles(v.r));
    /* The commit may have run: a reply that is not {code, value} is an unknown outcome. */
    order_walk_commit_verdict(NULL, &v);
    assert_int_equal(v.r, SEG_UNKNOWN);
    redisReply one = {.type = REDIS_REPLY_INTEGER, .integer = 1};
    order_walk_commit_verdict(&one, &v);
    assert_int_equal(v.r, SEG_UNKNOWN);
    pair(&p, STORE_COMMIT_OK, 4)->element[0]->integer = STORE_COMMIT_OK;
    p.top.elements = 1;
    order_walk_commit_verdict(&p.top, &v);
    assert_int_equal(v.r, SEG_UNKNOWN);
}

/* The codes are the ones the script's text returns (one definition for C and Lua). */
static void test_commit_codes_in_lua(void **state)
{
    (void)state;
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {"
                                                  "1"
                                                  ", left}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-1), n}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-3), int(sv or '0')}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-4), 0}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-5), 0}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-6), start}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-7), fin}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {(-10), rv}"));
    assert_non_null(strstr(STORE_LUA_COMMIT_BODY, "return {1, left, rec}"));
}

static void test_commit_failed(void **state)
{
    (void)state;
    assert_int_equal(order_walk_commit_failed(LC_ELOST, 1), SEG_LOST);
    assert_int_equal(order_walk_commit_failed(LC_ELOST, 0), SEG_ERROR);
    assert_int_equal(order_walk_commit_failed(LC_EIO, 1), SEG_UNKNOWN); /* may have run */
    assert_int_equal(order_walk_commit_failed(LC_EIO, 0), SEG_UNKNOWN);
    assert_int_equal(order_walk_commit_failed(LC_EREDIS, 1), SEG_ERROR); /* never ran */
    assert_int_equal(order_walk_commit_failed(LC_ETIMEOUT, 0), SEG_ERROR);
}

static void test_version_verdict(void **state)
{
    (void)state;
    assert_int_equal(order_walk_version(5, 7, 0, 0), VV_NOTREADY);
    assert_int_equal(order_walk_version(0, 7, 0, 0), VV_NOTREADY);
    assert_int_equal(order_walk_version(5, 7, 1, 0), VV_LEFT_OUT); /* behind after the heal */
    assert_int_equal(order_walk_version(9, 7, 0, 0), VV_STALE);
    assert_int_equal(order_walk_version(9, 7, 1, 3), VV_STALE);
    /* ahead again after re-reading the layout at the same version: ahead of the meta */
    assert_int_equal(order_walk_version(9, 7, 0, 7), VV_AHEAD);
}

static void test_settles(void **state)
{
    (void)state;
    assert_true(order_walk_settles(SEG_DONE));
    assert_true(order_walk_settles(SEG_UNKNOWN));
    assert_true(order_walk_settles(SEG_EXPIRED));
    assert_false(order_walk_settles(SEG_ERROR));
    assert_false(order_walk_settles(SEG_BUSY));
    assert_int_equal(order_walk_settled_outcome(SEG_DONE), OUT_CREATED);
    assert_int_equal(order_walk_settled_outcome(SEG_UNKNOWN), OUT_OUTCOME_UNKNOWN);
    assert_int_equal(order_walk_settled_outcome(SEG_EXPIRED), OUT_UNAVAILABLE);
    assert_int_equal(order_walk_settled_outcome(SEG_ERROR), OUT_UNAVAILABLE);
}

static void test_single_end(void **state)
{
    (void)state;
    enum order_outcome out = OUT_CREATED;
    assert_int_equal(order_walk_single_end(SEG_DONE, 1, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_CREATED); /* committed: a short segment before does not count */
    assert_int_equal(order_walk_single_end(SEG_EMPTY, 0, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_SOLD_OUT);
    assert_int_equal(order_walk_single_end(SEG_EMPTY, 1, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_INSUFFICIENT);
    assert_int_equal(order_walk_single_end(SEG_ERROR, 0, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_UNAVAILABLE);
    assert_int_equal(order_walk_single_end(SEG_UNKNOWN, 0, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_OUTCOME_UNKNOWN);
    assert_int_equal(order_walk_single_end(SEG_BUSY, 0, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_LOCK_TIMEOUT);
    assert_int_equal(order_walk_single_end(SEG_NOTREADY, 0, 0, &out), SE_SETTLE);
    assert_int_equal(order_walk_single_end(SEG_NOTREADY, 0, 1, &out), SE_PAUSE);
    assert_int_equal(order_walk_single_end(SEG_LOST, 0, 0, &out), SE_AGAIN);
    assert_int_equal(order_walk_single_end(SEG_STALE, 0, 0, &out), SE_RELOAD);
    /* a short segment seen earlier makes any undecided end "insufficient" */
    assert_int_equal(order_walk_single_end(SEG_LOST, 1, 0, &out), SE_ANSWER);
    assert_int_equal(out, OUT_INSUFFICIENT);
}

/* Sums take[] and checks each part against its segment's stock. */
static long long plan_sum(int n, const long long *stock, const long long *take)
{
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        assert_true(take[i] >= 0);
        assert_true(take[i] <= (stock[i] > 0 ? stock[i] : 0));
        sum += take[i];
    }
    return sum;
}

static void test_plan(void **state)
{
    (void)state;
    long long take[16];
    /* 1,000 units in 16 segments (62-63 each), an order of 70: two segments, the smaller (by
     * index among equals) emptied, the rest from the other */
    long long s1[16];
    for (int i = 0; i < 16; i++)
        s1[i] = i < 8 ? 63 : 62;
    assert_int_equal(order_walk_plan(16, s1, 70, take), 2);
    assert_int_equal(plan_sum(16, s1, take), 70);
    assert_int_equal(take[0] + take[1], 70); /* the largest (63) first, lowest index */
    /* the end of a sale: one unit in each of 16 segments, an order of 2, then of 16, then 17 */
    long long ones[16];
    for (int i = 0; i < 16; i++)
        ones[i] = 1;
    assert_int_equal(order_walk_plan(16, ones, 2, take), 2);
    assert_int_equal(plan_sum(16, ones, take), 2);
    assert_int_equal(order_walk_plan(16, ones, 16, take), 16);
    assert_int_equal(plan_sum(16, ones, take), 16);
    assert_int_equal(order_walk_plan(16, ones, 17, take), 0); /* below the total: none */
    for (int i = 0; i < 16; i++)
        assert_int_equal(take[i], 0);
    /* the fewest segments: {10, 6, 6} for 12 takes 10 and one 6; the 6 is emptied */
    long long s2[3] = {6, 10, 6};
    assert_int_equal(order_walk_plan(3, s2, 12, take), 2);
    assert_int_equal(take[1], 6);
    assert_int_equal(take[0] + take[2], 6);
    assert_true(take[0] == 6 || take[2] == 6);
    /* empty, negative (damaged) and zero stock are never taken from */
    long long s3[4] = {0, -5, 3, 4};
    assert_int_equal(order_walk_plan(4, s3, 7, take), 2);
    assert_int_equal(take[0], 0);
    assert_int_equal(take[1], 0);
    assert_int_equal(take[2], 3);
    assert_int_equal(take[3], 4);
    assert_int_equal(order_walk_plan(4, s3, 8, take), 0);
    assert_int_equal(order_walk_plan(4, s3, 0, take), 0);
    /* every part >= 1 and the total exact, over many shapes */
    for (unsigned seed = 1; seed < 2000; seed++) {
        long long st[16], total = 0;
        unsigned x = seed;
        int n = 1 + (int)(seed % 16);
        for (int i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            st[i] = (long long)((x >> 16) % 9);
            total += st[i];
        }
        int64_t q = 1 + (int64_t)(seed % 40);
        int parts = order_walk_plan(n, st, q, take);
        if (total < q) {
            assert_int_equal(parts, 0);
            continue;
        }
        assert_int_equal(plan_sum(n, st, take), q);
        int nonzero = 0;
        for (int i = 0; i < n; i++)
            nonzero += take[i] > 0;
        assert_int_equal(nonzero, parts);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_note_files_each_result),
        cmocka_unit_test(test_end_answers),
        cmocka_unit_test(test_busy_nth_across_words),
        cmocka_unit_test(test_round_end),
        cmocka_unit_test(test_acquire_verdict),
        cmocka_unit_test(test_commit_verdict),
        cmocka_unit_test(test_commit_codes_in_lua),
        cmocka_unit_test(test_commit_failed),
        cmocka_unit_test(test_version_verdict),
        cmocka_unit_test(test_settles),
        cmocka_unit_test(test_single_end),
        cmocka_unit_test(test_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
