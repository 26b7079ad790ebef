/*
 * Integration tests of fencing: tokens strictly increase across owners and processes;
 * lc_lock_eval runs a fenced script only for the current holder (a stale holder gets LC_ELOST
 * and changes nothing), LC_EVAL_RELEASE drops the hold in the same step and wakes waiters;
 * LC_LUA_FENCE_ACCEPT in a script of our own and lc_fence_newer reject stale tokens.
 */
#include "lc_test.h"

#include <pthread.h>

/* Sets KEYS[1] to ARGV[1] and returns the hold's fencing token. */
static const char SET_BODY[] = "redis.call('SET', KEYS[1], ARGV[1])\nreturn lc_fence\n";

/* A new fenced script of body; fails the test otherwise. */
static lc_script *fenced(const char *body)
{
    lc_script *s = NULL;
    assert_ok(lc_fenced_script_new(body, &s));
    assert_non_null(s);
    return s;
}

/* lc_lock_eval of SET_BODY: key := value. */
static lc_status eval_set(lc_lock *l, const lc_script *s, int flags, const char *key,
                          const char *value, redisReply **reply)
{
    const char *keys[] = {key};
    const char *args[] = {value};
    return lc_lock_eval(l, s, flags, 1, keys, NULL, 1, args, NULL, reply);
}

/* GET key into buf, "(nil)" when absent. */
static const char *get_str(const char *key, char *buf, size_t size)
{
    if (rf_string(gf_redis, buf, size, "GET %s", key) != 1)
        snprintf(buf, size, "(nil)");
    return buf;
}

/* Three owners taking turns: every new hold gets a larger token, also stored in NAME:fence. */
static void test_fence_increases_across_owners(void **state)
{
    (void)state;
    const char *name = "it_fence:owners";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *l[3];
    for (int i = 0; i < 3; i++)
        l[i] = lt_lock(c, name, 30000, 0);
    uint64_t prev = 0;
    for (int round = 0; round < 12; round++) {
        lc_lock *x = l[round % 3];
        uint64_t f = 0;
        assert_ok(lc_lock_acquire(x, 1000, &f));
        assert_true(f > prev);
        assert_int_equal(lc_lock_fence(x), f);
        assert_int_equal(lt_get_ll(gf_redis, "it_fence:owners:fence"), (long long)f);
        prev = f;
        assert_ok(lc_lock_release(x));
        assert_int_equal(lc_lock_fence(x), 0);
    }
    for (int i = 0; i < 3; i++)
        lc_lock_free(l[i]);
    lc_client_free(c);
}

/* Two processes x 50 holds, each logging its token under the lock: the log is strictly
 * increasing, so tokens follow the order of the holds across processes. */
#define FP_ROUNDS 50

/* FP_ROUNDS holds on name, logging each token under the lock. 0, or which check failed. */
static int fence_rounds(lc_client *c, const char *name)
{
    lc_lock *l = NULL;
    lc_lock_opts o = lt_opts(10000, 1);
    if (lc_lock_new(c, name, &o, &l) != LC_OK)
        return -1;
    uint64_t prev = 0;
    int bad = 0;
    for (int i = 0; i < FP_ROUNDS && !bad; i++) {
        uint64_t f = 0;
        if (lc_lock_acquire(l, 10000, &f) != LC_OK) {
            bad = 1;
            break;
        }
        if (f <= prev)
            bad = 2;
        prev = f;
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)f);
        const char *argv[] = {"RPUSH", "it_fence:log", buf};
        if (lc_client_command(c, 3, argv, NULL, NULL) != LC_OK)
            bad = 3;
        if (lc_lock_release(l) != LC_OK)
            bad = 4;
    }
    lc_lock_free(l);
    return bad;
}

static void test_fence_increases_across_processes(void **state)
{
    (void)state;
    const char *name = "it_fence:procs";
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = lt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        lc_client *c = NULL;
        LT_CHILD_CHECK(lc_client_new(rf_url(gf_redis), lt_client_opts(), &c) == LC_OK);
        char b;
        LT_CHILD_CHECK(read(go[0], &b, 1) == 1);
        int bad = fence_rounds(c, name);
        LT_CHILD_CHECK(bad == 0);
        lc_client_free(c);
        _exit(0);
    }
    close(go[0]);
    lc_client *c = lt_client(rf_url(gf_redis));
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    assert_int_equal(fence_rounds(c, name), 0);
    assert_int_equal(lt_wait_child(pid, 30000), 0);

    redisReply *r = rf_command(gf_redis, "LRANGE it_fence:log 0 -1");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2 * FP_ROUNDS);
    unsigned long long prev = 0;
    for (size_t i = 0; i < r->elements; i++) {
        unsigned long long f = strtoull(r->element[i]->str, NULL, 10);
        if (f <= prev)
            fail_msg("log[%zu] = %llu after %llu", i, f, prev);
        prev = f;
    }
    freeReplyObject(r);
    lc_client_free(c);
}

/* The holder's fenced script runs: it sees KEYS/ARGV, lc_fence and lc_lock_key. */
static void test_eval_by_holder(void **state)
{
    (void)state;
    const char *name = "it_fence:eval";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *set = fenced(SET_BODY);
    lc_script *key = fenced("return lc_lock_key");
    lc_lock *a = lt_lock(c, name, 30000, 1);
    uint64_t f = 0;
    assert_ok(lc_lock_acquire(a, 0, &f));

    redisReply *reply = NULL;
    assert_ok(eval_set(a, set, 0, "it_fence:data", "one", &reply));
    assert_non_null(reply);
    assert_int_equal(reply->type, REDIS_REPLY_INTEGER);
    assert_int_equal(reply->integer, (long long)f);
    freeReplyObject(reply);
    char buf[64];
    assert_string_equal(get_str("it_fence:data", buf, sizeof buf), "one");

    reply = NULL;
    assert_ok(lc_lock_eval(a, key, 0, 0, NULL, NULL, 0, NULL, NULL, &reply));
    assert_non_null(reply);
    assert_int_equal(reply->type, REDIS_REPLY_STRING);
    assert_string_equal(reply->str, name);
    freeReplyObject(reply);
    /* reply may be NULL when the caller does not want it. */
    assert_ok(eval_set(a, set, 0, "it_fence:data", "two", NULL));
    assert_string_equal(get_str("it_fence:data", buf, sizeof buf), "two");
    assert_int_equal(lc_lock_held(a), 1);

    assert_ok(lc_lock_release(a));
    lc_lock_free(a);
    lc_script_free(set);
    lc_script_free(key);
    lc_client_free(c);
}

/* A holder whose lease ran out (and whose lock another owner took, or nobody) gets LC_ELOST and
 * its write does not happen; a handle that never held gets LC_ENOTHELD. */
static void test_eval_stale_holder(void **state)
{
    (void)state;
    const char *name = "it_fence:stale";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *set = fenced(SET_BODY);
    redisReply *r = rf_command(gf_redis, "SET it_fence:data orig");
    freeReplyObject(r);
    char buf[64];

    /* Expired, nobody else took it. */
    lc_lock *a = lt_lock(c, name, 200, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    tu_sleep_ms(300);
    redisReply *reply = NULL;
    assert_status(eval_set(a, set, 0, "it_fence:data", "stale1", &reply), LC_ELOST);
    freeReplyObject(reply);
    assert_string_equal(get_str("it_fence:data", buf, sizeof buf), "orig");

    /* Expired and taken by B. */
    lc_lock *b = lt_lock(c, name, 30000, 0);
    uint64_t fa = 0, fb = 0;
    if (lc_lock_held(a))
        (void)lc_lock_release(a);
    assert_ok(lc_lock_acquire(a, 0, &fa));
    tu_sleep_ms(300);
    assert_ok(lc_lock_acquire(b, 0, &fb));
    assert_true(fb > fa);
    assert_status(eval_set(a, set, 0, "it_fence:data", "stale2", NULL), LC_ELOST);
    assert_string_equal(get_str("it_fence:data", buf, sizeof buf), "orig");
    assert_ok(eval_set(b, set, 0, "it_fence:data", "fresh", NULL));
    assert_string_equal(get_str("it_fence:data", buf, sizeof buf), "fresh");

    /* Never held. */
    lc_lock *n = lt_lock(c, name, 30000, 0);
    assert_status(eval_set(n, set, 0, "it_fence:data", "never", NULL), LC_ENOTHELD);
    assert_string_equal(get_str("it_fence:data", buf, sizeof buf), "fresh");
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, name, owner, sizeof owner), lc_lock_token(b));

    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_lock_free(n);
    lc_script_free(set);
    lc_client_free(c);
}

/* LC_EVAL_RELEASE: the body runs and one hold is dropped in the same step. */
static void test_eval_release(void **state)
{
    (void)state;
    const char *name = "it_fence:evrel";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *incr = fenced("return redis.call('INCR', KEYS[1])");
    lc_lock *a = lt_lock(c, name, 30000, 1);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_ok(lc_lock_acquire(a, 0, NULL));
    const char *keys[] = {"it_fence:counter"};

    redisReply *reply = NULL;
    assert_ok(lc_lock_eval(a, incr, LC_EVAL_RELEASE, 1, keys, NULL, 0, NULL, NULL, &reply));
    assert_non_null(reply);
    assert_int_equal(reply->integer, 1);
    freeReplyObject(reply);
    assert_int_equal(lc_lock_held(a), 1);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 1);

    assert_ok(lc_lock_eval(a, incr, LC_EVAL_RELEASE, 1, keys, NULL, 0, NULL, NULL, NULL));
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_int_equal(lt_get_ll(gf_redis, "it_fence:counter"), 2);
    /* Nothing left to release, nothing renewed back into existence. */
    assert_status(lc_lock_release(a), LC_ENOTHELD);
    tu_sleep_ms(100);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);

    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_try(b, NULL));
    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_script_free(incr);
    lc_client_free(c);
}

/* The full release done by LC_EVAL_RELEASE publishes the unlock like lc_lock_release. */
static void test_eval_release_wakes_waiter(void **state)
{
    (void)state;
    const char *name = "it_fence:evwake";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *set = fenced(SET_BODY);
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lt_acquirer t = {0};
    t.lock = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_int_equal(pthread_create(&t.tid, NULL, lt_acquire_main, &t), 0);
    tu_sleep_ms(320);
    int64_t t_rel = tu_now_us();
    assert_ok(eval_set(a, set, LC_EVAL_RELEASE, "it_fence:data", "x", NULL));
    pthread_join(t.tid, NULL);
    assert_status(t.st, LC_OK);
    assert_between(t.done_us - t_rel, 0, 50000);
    assert_ok(lc_lock_release(t.lock));
    lc_lock_free(t.lock);
    lc_lock_free(a);
    lc_script_free(set);
    lc_client_free(c);
}

/* A script of our own with LC_LUA_FENCE_ACCEPT pasted in: writes KEYS[2] := ARGV[2] only for a
 * token >= the highest seen at KEYS[1]; returns 1 when it wrote, 0 when it refused. */
static lc_script *accept_script(void)
{
    static const char body[] = "\nif lc_fence_accept(KEYS[1], tonumber(ARGV[1])) then\n"
                               "  redis.call('SET', KEYS[2], ARGV[2])\n"
                               "  return 1\n"
                               "end\n"
                               "return 0\n";
    size_t n = strlen(LC_LUA_FENCE_ACCEPT) + sizeof body;
    char *src = malloc(n);
    assert_non_null(src);
    snprintf(src, n, "%s%s", LC_LUA_FENCE_ACCEPT, body);
    lc_script *s = NULL;
    lc_status st = lc_script_new(src, &s);
    free(src);
    assert_status(st, LC_OK);
    return s;
}

/* Runs accept_script with token and value: its 1/0 answer, or -1 on error. */
static long long run_accept(lc_client *c, const lc_script *s, unsigned long long token,
                            const char *value)
{
    char tok[32];
    snprintf(tok, sizeof tok, "%llu", token);
    const char *keys[] = {"it_fence:seen", "it_fence:store"};
    const char *args[] = {tok, value};
    redisReply *r = NULL;
    lc_status st = lc_script_run(c, s, 2, keys, NULL, 2, args, NULL, &r);
    long long v = -1;
    if (st == LC_OK && r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else
        print_error("lc_script_run: %s (%s) reply type %d %s\n", lc_status_name(st), lc_errmsg(),
                    r ? r->type : -1, r && r->str ? r->str : "");
    freeReplyObject(r);
    return v;
}

static void test_lua_fence_accept(void **state)
{
    (void)state;
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *s = accept_script();
    char buf[64];
    assert_int_equal(run_accept(c, s, 5, "a"), 1);
    assert_int_equal(run_accept(c, s, 7, "b"), 1);
    assert_int_equal(run_accept(c, s, 6, "stale"), 0);
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "b");
    assert_int_equal(run_accept(c, s, 7, "c"), 1); /* the same holder writes again */
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "c");
    assert_int_equal(lt_get_ll(gf_redis, "it_fence:seen"), 7);
    assert_int_equal(run_accept(c, s, 1, "old"), 0);
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "c");

    /* With real tokens: a holder whose lease ran out is refused after the next one wrote. */
    const char *name = "it_fence:accept";
    lc_lock *a = lt_lock(c, name, 200, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    uint64_t fa = 0, fb = 0;
    assert_ok(lc_lock_acquire(a, 0, &fa));
    tu_sleep_ms(300);
    assert_ok(lc_lock_acquire(b, 0, &fb));
    redisReply *r = rf_command(gf_redis, "DEL it_fence:seen");
    freeReplyObject(r);
    assert_int_equal(run_accept(c, s, fb, "from b"), 1);
    assert_int_equal(run_accept(c, s, fa, "from a"), 0);
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "from b");
    assert_ok(lc_lock_release(b));

    lc_lock_free(a);
    lc_lock_free(b);
    lc_script_free(s);
    lc_client_free(c);
}

/* Tokens are 64-bit counters: the Lua rule must keep working past 10^14 (where Lua's default
 * number-to-string conversion starts rounding) and record the highest token exactly. */
static void test_lua_fence_accept_large_tokens(void **state)
{
    (void)state;
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *s = accept_script();
    char buf[64];
    const unsigned long long big = 123456789012345ULL; /* exact as a double, 15 digits */
    assert_int_equal(run_accept(c, s, big, "new"), 1);
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET it_fence:seen"), 1);
    assert_string_equal(buf, "123456789012345");
    assert_int_equal(run_accept(c, s, big - 1, "stale"), 0);
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "new");
    assert_true(lc_fence_newer(big, big - 1));
    assert_false(lc_fence_newer(big - 1, big));
    lc_script_free(s);
    lc_client_free(c);
}

/* A token-fenced SET (lc_token_fenced_script_new) run with the token string tok ("T" or
 * "T:owner"): 1 when it wrote, 0 when refused (*seen then the seen token it answered). */
static long long run_token_set(lc_client *c, const lc_script *s, const char *tok, const char *v,
                               unsigned long long *seen)
{
    const char *keys[] = {"it_fence:seen", "it_fence:store"};
    const char *args[] = {tok, v};
    redisReply *r = NULL;
    lc_status st = lc_script_run(c, s, 2, keys, NULL, 2, args, NULL, &r);
    const redisReply *body = NULL;
    long long out = -1;
    if (st == LC_OK) {
        lc_status t = lc_token_reply(r, &body);
        out = t == LC_OK ? 1 : t == LC_ELOST ? 0 : -1;
        *seen = lc_token_reply_seen(r);
    }
    freeReplyObject(r);
    return out;
}

/* Issue 29 item 9: an equal token passes only from the same acquisition (its owner), tokens
 * compare exactly past 2^53, and a refusal answers the seen token. */
static void test_token_owner_and_seen(void **state)
{
    (void)state;
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new("redis.call('SET', KEYS[1], ARGV[1])", &s));
    unsigned long long seen = 0;
    char buf[64];
    assert_int_equal(run_token_set(c, s, "7:a", "a1", &seen), 1);
    assert_int_equal(run_token_set(c, s, "7:a", "a2", &seen), 1); /* the same hold again */
    assert_int_equal(run_token_set(c, s, "7:b", "b", &seen), 0);  /* another acquisition */
    assert_true(seen == 7);
    assert_int_equal(run_token_set(c, s, "7", "none", &seen), 0); /* no owner is not "a" */
    assert_int_equal(run_token_set(c, s, "6:a", "old", &seen), 0);
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "a2");
    assert_int_equal(run_token_set(c, s, "8:b", "b", &seen), 1);
    assert_string_equal(get_str("it_fence:seen", buf, sizeof buf), "8:b");
    /* 2^53 + 1 against 2^53: equal as doubles, not as tokens */
    assert_int_equal(run_token_set(c, s, "9007199254740992:x", "x", &seen), 1);
    assert_int_equal(run_token_set(c, s, "9007199254740993:y", "y", &seen), 1);
    assert_int_equal(run_token_set(c, s, "9007199254740992:z", "z", &seen), 0);
    assert_true(seen == 9007199254740993ULL);
    assert_int_equal(run_token_set(c, s, "18446744073709551615:m", "max", &seen), 1);
    assert_int_equal(run_token_set(c, s, "18446744073709551614:n", "n", &seen), 0);
    assert_true(seen == UINT64_MAX);
    assert_int_equal(run_token_set(c, s, "x:n", "bad", &seen), 0); /* not a token */
    assert_string_equal(get_str("it_fence:store", buf, sizeof buf), "max");
    /* the old form stays as it was: "T" after "T" is the same holder */
    redisReply *d = rf_command(gf_redis, "SET it_fence:seen 12");
    freeReplyObject(d);
    assert_int_equal(run_token_set(c, s, "12", "old form", &seen), 1);
    lc_script_free(s);
    lc_client_free(c);
}

/* lc_fence_newer is the same rule as the Lua one: token >= highest seen. */
static void test_fence_newer(void **state)
{
    (void)state;
    assert_true(lc_fence_newer(5, 4));
    assert_true(lc_fence_newer(5, 5));
    assert_false(lc_fence_newer(4, 5));
    assert_true(lc_fence_newer(1, 0));
    assert_true(lc_fence_newer(UINT64_MAX, UINT64_MAX - 1));
    assert_false(lc_fence_newer(UINT64_MAX - 1, UINT64_MAX));
    assert_false(lc_fence_newer(0, UINT64_MAX));
    assert_true(lc_fence_newer((uint64_t)1 << 53, ((uint64_t)1 << 53) - 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_fence_increases_across_owners, gf_flush),
        cmocka_unit_test_setup(test_fence_increases_across_processes, gf_flush),
        cmocka_unit_test_setup(test_eval_by_holder, gf_flush),
        cmocka_unit_test_setup(test_eval_stale_holder, gf_flush),
        cmocka_unit_test_setup(test_eval_release, gf_flush),
        cmocka_unit_test_setup(test_eval_release_wakes_waiter, gf_flush),
        cmocka_unit_test_setup(test_lua_fence_accept, gf_flush),
        cmocka_unit_test_setup(test_lua_fence_accept_large_tokens, gf_flush),
        cmocka_unit_test_setup(test_token_owner_and_seen, gf_flush),
        cmocka_unit_test(test_fence_newer),
    };
    return cmocka_run_group_tests_name("it_fence", tests, gf_group_setup, gf_group_teardown);
}
