/*
 * Unit tests of the per-user request rate's counting (service/src/loop/userrate.c), three
 * limiters standing for three instances on a simulated clock, their counts carried by an
 * in-test copy of lua/user_rate.lua's rule every 25 ms (the flusher's drain and learn, without
 * Redis; it_user_rate runs the real thing): a bot at 200 requests/s round robin is held to
 * N + 3 a second once it went over, and gets about N; a steady user under N is never refused;
 * a user seen once per window by an instance costs no flush; one instance alone holds to N;
 * Retry-After is the rest of the second; a user moving from one instance to another is not
 * shut out for more than a second. Well under a second.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "userrate.h"

#define N 20
#define NI 3

/* lua/user_rate.lua's hash for one user, in C. */
static struct {
    long long w, a, t, pt;
} redis = {-1, 0, 0, 0};

/* What one drain took (fn runs under the limiter's lock: applied after it). */
struct sent {
    int n;
    char user[64][32];
    int64_t win[64];
    int adm[64], tried[64];
};

static void take_one(const char *user, int64_t win, int adm, int tried, void *arg)
{
    struct sent *s = arg;
    assert_true(s->n < 64);
    snprintf(s->user[s->n], sizeof(s->user[0]), "%s", user);
    s->win[s->n] = win;
    s->adm[s->n] = adm;
    s->tried[s->n] = tried;
    s->n++;
}

/* lua/user_rate.lua on the simulated hash, and the reply learnt. */
static void apply(struct userrate *ur, const char *user, int64_t win, int adm, int tried)
{
    if (win > redis.w) {
        redis.pt = redis.w == win - 1 ? redis.t : 0;
        redis.a = redis.t = 0;
        redis.w = win;
    }
    if (win == redis.w) {
        redis.a += adm;
        redis.t += tried;
    } else if (win == redis.w - 1) {
        redis.pt += tried;
    }
    userrate_learn(ur, user, redis.w, redis.a, redis.t, redis.pt);
}

static int flush_all(struct userrate **ur, int n, int64_t now)
{
    int total = 0;
    for (int i = 0; i < n; i++) {
        struct sent s = {0};
        userrate_drain(ur[i], now, take_one, &s);
        for (int k = 0; k < s.n; k++)
            apply(ur[i], s.user[k], s.win[k], s.adm[k], s.tried[k]);
        total += s.n;
    }
    return total;
}

static void test_userrate_bot_held_across_three(void **state)
{
    (void)state;
    memset(&redis, 0, sizeof(redis));
    redis.w = -1;
    struct userrate *ur[NI];
    for (int i = 0; i < NI; i++)
        assert_non_null(ur[i] = userrate_new(N));
    const int64_t t0 = 1800000000000LL; /* a second's start */
    int ok[8] = {0}, alice_refused = 0;
    long sent = 0;
    for (int64_t ms = 0; ms < 8000; ms++) {
        int64_t now = t0 + ms;
        if (ms % 5 == 0) /* 200 a second */
            ok[ms / 1000] += userrate_take(ur[sent++ % NI], "bot", now) == 0;
        if (ms % 250 == 0) /* 4 a second */
            alice_refused += userrate_take(ur[(ms / 250) % NI], "alice", now) != 0;
        if (ms % USERRATE_FLUSH_MS == 0)
            flush_all(ur, NI, now);
    }
    for (int s = 0; s < 8; s++) {
        print_message("second %d: %d through\n", s, ok[s]);
        assert_true(ok[s] <= (s == 0 ? N + NI + 200 * USERRATE_FLUSH_MS / 1000 : N + NI));
        assert_true(ok[s] >= N - NI);
    }
    assert_int_equal(alice_refused, 0);
    for (int i = 0; i < NI; i++)
        userrate_free(ur[i]);
}

static void test_userrate_alone_and_retry_after(void **state)
{
    (void)state;
    struct userrate *ur = userrate_new(5);
    const int64_t t0 = 1800000000000LL;
    for (int i = 0; i < 5; i++)
        assert_int_equal(userrate_take(ur, "u", t0 + i), 0);
    assert_int_equal(userrate_take(ur, "u", t0 + 10), 1); /* 990 ms left: 1 s */
    assert_int_equal(userrate_take(ur, "v", t0 + 10), 0); /* another user */
    assert_int_equal(userrate_take(ur, "u", t0 + 999), 1);
    assert_int_equal(userrate_take(ur, "u", t0 + 1000), 0); /* the next second */
    /* no user, no limiter: through */
    assert_int_equal(userrate_take(ur, "", t0), 0);
    assert_int_equal(userrate_take(ur, NULL, t0), 0);
    assert_int_equal(userrate_take(NULL, "u", t0), 0);
    assert_null(userrate_new(0));
    userrate_free(ur);
}

static void test_userrate_single_requests_cost_nothing(void **state)
{
    (void)state;
    memset(&redis, 0, sizeof(redis));
    redis.w = -1;
    struct userrate *ur[1] = {userrate_new(N)};
    const int64_t t0 = 1800000000000LL;
    char user[32];
    for (int u = 0; u < 1000; u++) {
        snprintf(user, sizeof(user), "poller-%d", u);
        assert_int_equal(userrate_take(ur[0], user, t0 + u), 0);
    }
    assert_int_equal(flush_all(ur, 1, t0 + 1000 - 1), 0);
    assert_int_equal(userrate_tracked(ur[0]), 1000);
    /* a second request in the window: that user's count is sent */
    assert_int_equal(userrate_take(ur[0], "poller-7", t0 + 999), 0);
    assert_int_equal(flush_all(ur, 1, t0 + 999), 1);
    userrate_free(ur[0]);
}

static void test_userrate_moving_user(void **state)
{
    (void)state;
    memset(&redis, 0, sizeof(redis));
    redis.w = -1;
    struct userrate *ur[2] = {userrate_new(N), userrate_new(N)};
    const int64_t t0 = 1800000000000LL;
    int ok[4] = {0};
    for (int64_t ms = 0; ms < 4000; ms++) {
        /* all on instance 0 for two seconds, then all on instance 1 */
        if (ms % 10 == 0)
            ok[ms / 1000] += userrate_take(ur[ms < 2000 ? 0 : 1], "m", t0 + ms) == 0;
        if (ms % USERRATE_FLUSH_MS == 0)
            flush_all(ur, 2, t0 + ms);
    }
    for (int s = 0; s < 4; s++)
        print_message("second %d: %d through\n", s, ok[s]);
    assert_int_equal(ok[0], N);
    assert_int_equal(ok[1], N);
    assert_true(ok[2] >= 1);    /* instance 1's share was 0: at least 1 */
    assert_int_equal(ok[3], N); /* its share is all of it now */
    userrate_free(ur[0]);
    userrate_free(ur[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_userrate_bot_held_across_three),
        cmocka_unit_test(test_userrate_alone_and_retry_after),
        cmocka_unit_test(test_userrate_single_requests_cost_nothing),
        cmocka_unit_test(test_userrate_moving_user),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
