/*
 * Unit tests of service/src/http/ratelimit.c: the token bucket (burst, refill, Retry-After, a clock
 * going backwards, no overflow at the largest settings), peer keys (IPv4, IPv4-mapped IPv6,
 * IPv6 /64, other families), entries that expire once their bucket is full again, the table's
 * bound under a flood of distinct peers, and exact accounting under concurrent takers.
 * Time is passed in, so nothing sleeps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ratelimit.h"

static void key_of(const char *ip, unsigned char key[RATELIMIT_KEY_LEN])
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;
    if (inet_pton(AF_INET, ip, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
        in6->sin6_family = AF_INET6;
    }
    assert_int_equal(ratelimit_key((struct sockaddr *)&ss, key), 0);
}

static void test_new_rejects_bad_settings(void **state)
{
    (void)state;
    assert_null(ratelimit_new(0, 1));
    assert_null(ratelimit_new(1, 0));
    assert_null(ratelimit_new(-5, 10));
    assert_null(ratelimit_new(1000001, 1));
    assert_null(ratelimit_new(1, 1000001));
    ratelimit_free(NULL);
    /* A NULL limiter limits nothing. */
    unsigned char k[RATELIMIT_KEY_LEN] = {0};
    assert_int_equal(ratelimit_take_key(NULL, k, 0), 0);
}

static void test_burst_then_refused(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(10, 5);
    assert_non_null(rl);
    unsigned char k[RATELIMIT_KEY_LEN];
    key_of("192.0.2.1", k);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ratelimit_take_key(rl, k, 1000), 0);
    assert_int_equal(ratelimit_take_key(rl, k, 1000), 1); /* Retry-After: 1 s */
    assert_int_equal(ratelimit_take_key(rl, k, 1050), 1); /* half a token after 50 ms */
    /* 100 ms at 10/s = one token (the refused tries took nothing). */
    assert_int_equal(ratelimit_take_key(rl, k, 1100), 0);
    assert_int_equal(ratelimit_take_key(rl, k, 1100), 1);
    /* A long pause refills up to the burst only. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(ratelimit_take_key(rl, k, 100000), 0);
    assert_int_equal(ratelimit_take_key(rl, k, 100000), 1);
    ratelimit_free(rl);
}

static void test_steady_rate(void **state)
{
    (void)state;
    /* 4 per second, burst 1: over 10 s at one try per ms, exactly 1 + 40 pass. (A rate that
     * does not divide 1000 loses the thousandths that overflow the full bucket, as any token
     * bucket does.) */
    struct ratelimit *rl = ratelimit_new(4, 1);
    unsigned char k[RATELIMIT_KEY_LEN];
    key_of("198.51.100.7", k);
    int passed = 0;
    for (int64_t t = 0; t <= 10000; t++)
        passed += ratelimit_take_key(rl, k, 5000 + t) == 0;
    assert_int_equal(passed, 41);
    ratelimit_free(rl);
}

static void test_retry_after_rounds_up(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(1, 1);
    unsigned char k[RATELIMIT_KEY_LEN];
    key_of("203.0.113.9", k);
    assert_int_equal(ratelimit_take_key(rl, k, 0), 0);
    assert_int_equal(ratelimit_take_key(rl, k, 1), 1);   /* 999 ms left: 1 s */
    assert_int_equal(ratelimit_take_key(rl, k, 999), 1); /* 1 ms left: still 1 s */
    assert_int_equal(ratelimit_take_key(rl, k, 1000), 0);
    ratelimit_free(rl);
}

static void test_peers_are_independent(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(1, 2);
    unsigned char a[RATELIMIT_KEY_LEN], b[RATELIMIT_KEY_LEN];
    key_of("10.0.0.1", a);
    key_of("10.0.0.2", b);
    assert_int_equal(ratelimit_take_key(rl, a, 0), 0);
    assert_int_equal(ratelimit_take_key(rl, a, 0), 0);
    assert_int_not_equal(ratelimit_take_key(rl, a, 0), 0);
    assert_int_equal(ratelimit_take_key(rl, b, 0), 0);
    assert_int_equal(ratelimit_take_key(rl, b, 0), 0);
    assert_int_not_equal(ratelimit_take_key(rl, b, 0), 0);
    ratelimit_free(rl);
}

static void test_keys(void **state)
{
    (void)state;
    unsigned char a[RATELIMIT_KEY_LEN], b[RATELIMIT_KEY_LEN];
    /* IPv4 and the same address IPv4-mapped are one peer. */
    key_of("127.0.0.1", a);
    key_of("::ffff:127.0.0.1", b);
    assert_memory_equal(a, b, RATELIMIT_KEY_LEN);
    key_of("127.0.0.2", b);
    assert_memory_not_equal(a, b, RATELIMIT_KEY_LEN);
    /* IPv6: the /64 is the peer. */
    key_of("2001:db8:1:2::1", a);
    key_of("2001:db8:1:2:ffff:eeee:dddd:cccc", b);
    assert_memory_equal(a, b, RATELIMIT_KEY_LEN);
    key_of("2001:db8:1:3::1", b);
    assert_memory_not_equal(a, b, RATELIMIT_KEY_LEN);
    /* ::1 and 0.0.0.1 differ. */
    key_of("::1", a);
    key_of("0.0.0.1", b);
    assert_memory_not_equal(a, b, RATELIMIT_KEY_LEN);

    /* Other families and NULL have no key and are never limited. */
    struct sockaddr_un un;
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    assert_int_equal(ratelimit_key((struct sockaddr *)&un, a), -1);
    assert_int_equal(ratelimit_key(NULL, a), -1);
    struct ratelimit *rl = ratelimit_new(1, 1);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(ratelimit_take(rl, (struct sockaddr *)&un, 0), 0);
        assert_int_equal(ratelimit_take(rl, NULL, 0), 0);
    }
    /* ratelimit_take keys like ratelimit_key. */
    struct sockaddr_in in4;
    memset(&in4, 0, sizeof(in4));
    in4.sin_family = AF_INET;
    inet_pton(AF_INET, "192.0.2.55", &in4.sin_addr);
    assert_int_equal(ratelimit_take(rl, (struct sockaddr *)&in4, 0), 0);
    assert_int_equal(ratelimit_take(rl, (struct sockaddr *)&in4, 0), 1);
    ratelimit_free(rl);
}

static void test_clock_backwards(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(10, 1);
    unsigned char k[RATELIMIT_KEY_LEN];
    key_of("192.0.2.77", k);
    assert_int_equal(ratelimit_take_key(rl, k, 10000), 0);
    /* Back 5 s, then forward to 10050: only 50 ms (half a token) have passed since. */
    assert_int_equal(ratelimit_take_key(rl, k, 5000), 1);
    assert_int_equal(ratelimit_take_key(rl, k, 10050), 1);
    assert_int_equal(ratelimit_take_key(rl, k, 10100), 0);
    ratelimit_free(rl);
}

static void test_largest_settings_no_overflow(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(1000000, 1000000);
    unsigned char k[RATELIMIT_KEY_LEN];
    key_of("192.0.2.200", k);
    assert_int_equal(ratelimit_take_key(rl, k, 0), 0);
    assert_int_equal(ratelimit_take_key(rl, k, INT64_MAX / 2), 0);
    assert_int_equal(ratelimit_take_key(rl, k, INT64_MAX - 1), 0);
    assert_int_equal(ratelimit_take_key(rl, k, INT64_MIN + 1), 0);
    ratelimit_free(rl);
}

static void test_entries_expire(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(2, 4);
    unsigned char k[RATELIMIT_KEY_LEN];
    assert_int_equal(ratelimit_tracked(rl, 0), 0);
    for (int i = 0; i < 10; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.1.0.%d", i);
        key_of(ip, k);
        assert_int_equal(ratelimit_take_key(rl, k, 0), 0);
    }
    assert_int_equal(ratelimit_tracked(rl, 0), 10);
    assert_int_equal(ratelimit_tracked(rl, 499), 10); /* 1 token back needs 500 ms */
    /* Full again after 500 ms at 2/s: nothing left to remember. */
    assert_int_equal(ratelimit_tracked(rl, 500), 0);
    ratelimit_free(rl);
}

static void test_flood_of_peers_is_bounded(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(1, 1);
    unsigned char k[RATELIMIT_KEY_LEN];
    /* 200,000 distinct addresses, each empties its bucket: the table keeps at most its fixed
     * number of entries (the least recently seen are forgotten). */
    for (uint32_t i = 0; i < 200000; i++) {
        memset(k, 0, sizeof(k));
        k[10] = k[11] = 0xff;
        uint32_t a = htonl(0x0a000000u + i);
        memcpy(k + 12, &a, 4);
        assert_int_equal(ratelimit_take_key(rl, k, 1000), 0);
    }
    size_t tracked = ratelimit_tracked(rl, 1000);
    assert_true(tracked <= (size_t)RATELIMIT_STRIPES * RATELIMIT_WAYS);
    assert_true(tracked > (size_t)RATELIMIT_STRIPES * RATELIMIT_WAYS / 2);
    /* The most recent peer is still remembered and limited. */
    assert_int_equal(ratelimit_take_key(rl, k, 1000), 1);
    ratelimit_free(rl);
}

struct taker {
    struct ratelimit *rl;
    int passed;
};

static void *take_many(void *arg)
{
    struct taker *t = arg;
    unsigned char k[RATELIMIT_KEY_LEN];
    memset(k, 0, sizeof(k));
    k[0] = 0x20;
    for (int i = 0; i < 20000; i++)
        t->passed += ratelimit_take_key(t->rl, k, 42) == 0;
    return NULL;
}

static void test_concurrent_takers_exact(void **state)
{
    (void)state;
    /* At one instant, 4 threads x 20,000 tries on one peer: exactly the burst passes. */
    struct ratelimit *rl = ratelimit_new(1, 1000);
    pthread_t th[4];
    struct taker t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (struct taker){rl, 0};
        assert_int_equal(pthread_create(&th[i], NULL, take_many, &t[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += t[i].passed;
    }
    assert_int_equal(total, 1000);
    ratelimit_free(rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_rejects_bad_settings),
        cmocka_unit_test(test_burst_then_refused),
        cmocka_unit_test(test_steady_rate),
        cmocka_unit_test(test_retry_after_rounds_up),
        cmocka_unit_test(test_peers_are_independent),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_largest_settings_no_overflow),
        cmocka_unit_test(test_entries_expire),
        cmocka_unit_test(test_flood_of_peers_is_bounded),
        cmocka_unit_test(test_concurrent_takers_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
