/*
 * Integration tests of lockcore's one asynchronous lock interface (lockcore_anylock.h,
 * anylock.c) against real redis-servers: the same calls on two backends, the Redis lock on the
 * data store and a Redlock over five independent masters with the data store apart — acquire
 * with reads, a second owner refused, the fenced commit with release, a wait woken by it, a
 * plain release — and what the table adds for a token-fenced backend: the MGET after the
 * acquire, a detached commit refused by the store's seen token that raises the nodes' counters
 * past it, and a handle closed before its node clients (later calls LC_ESTATE). About 3 s.
 * MySQL and ZooKeeper run through the same table in inventoryd's it_lock_mysql and
 * it_lock_zookeeper.
 */
#include "lt_async_nodes.h"

#include <stdlib.h>

#include "lockcore/lockcore_anylock.h"

static lt_nodes nodes;
static lc_async_client *store_cl;
static lc_async_client *cl[LT_NODES];

/* The five lock nodes, and the data store (gf_redis), not one of them (lt_async_nodes.h). */
static int group_setup(void **state)
{
    (void)state;
    return lt_async_nodes_start(&nodes);
}

static int setup(void **state)
{
    (void)state;
    return lt_async_nodes_open(&nodes, cl, &store_cl);
}

static int teardown(void **state)
{
    (void)state;
    lt_async_nodes_close(cl, &store_cl);
    return 0;
}

static lc_anylock_backend backend(int redlock)
{
    lc_anylock_backend b = {.ops = &lc_anylock_redis, .client = store_cl, .store = store_cl};
    if (redlock) {
        b.ops = &lc_anylock_redlock;
        b.client = NULL;
        b.nodes = cl;
        b.n = LT_NODES;
        b.node_timeout_ms = 500;
    }
    return b;
}

static lc_anylock *anylock(int redlock, const char *name)
{
    lc_anylock_backend b = backend(redlock);
    lc_lock_opts o;
    lc_lock_opts_init(&o);
    o.lease_ms = 10000;
    o.watchdog = 0;
    lc_anylock *l = NULL;
    assert_ok(lc_anylock_new(&b, name, &o, &l));
    return l;
}

typedef struct result {
    int calls;
    lc_status st;
    redisReply *reply; /* a copy of what the callback got (strings and integers only) */
} result;

static int done(void *arg)
{
    return ((result *)arg)->calls > 0;
}

/* A copy of r, as far as these tests read it. */
static redisReply *copy(const redisReply *r)
{
    if (!r)
        return NULL;
    redisReply *c = calloc(1, sizeof(*c));
    c->type = r->type;
    c->integer = r->integer;
    if (r->str)
        c->str = strndup(r->str, r->len), c->len = r->len;
    if (r->elements) {
        c->elements = r->elements;
        c->element = calloc(r->elements, sizeof(*c->element));
        for (size_t i = 0; i < r->elements; i++)
            c->element[i] = copy(r->element[i]);
    }
    return c;
}

static void on_acquired(lc_anylock *l, lc_status st, const redisReply *values, void *arg)
{
    (void)l;
    result *r = arg;
    r->calls++;
    r->st = st;
    r->reply = copy(values);
}

static void on_eval(lc_anylock *l, lc_status st, const redisReply *reply, void *arg)
{
    on_acquired(l, st, reply, arg);
}

static void on_reply(lc_status st, const redisReply *reply, const char *errstr, void *arg)
{
    (void)errstr;
    on_acquired(NULL, st, reply, arg);
}

/* Runs the operation's callback to completion: once, not from inside the starting call. */
#define RUN(res, want)                                                                             \
    do {                                                                                           \
        assert_int_equal((res).calls, 0);                                                          \
        assert_true(lt_run_until(done, &(res), 10000));                                            \
        assert_int_equal((res).calls, 1);                                                          \
        if ((res).st != (want))                                                                    \
            fail_msg("got %s, expected %s", lc_status_name((res).st), lc_status_name(want));       \
    } while (0)

/* As RUN, for an operation that may already have ended while the loop ran for another (a waiter
 * granted by a release the test ran first: both answer on the same loop). */
#define RUN_ENDED(res, want)                                                                       \
    do {                                                                                           \
        assert_true(lt_run_until(done, &(res), 10000));                                            \
        assert_int_equal((res).calls, 1);                                                          \
        if ((res).st != (want))                                                                    \
            fail_msg("got %s, expected %s", lc_status_name((res).st), lc_status_name(want));       \
    } while (0)

static void reset(result *r)
{
    freeReplyObject(r->reply);
    memset(r, 0, sizeof(*r));
}

static void set_key(const char *key, const char *value)
{
    redisReply *r = rf_command(gf_redis, "SET %s %s", key, value);
    assert_non_null(r);
    freeReplyObject(r);
}

/* Decrements KEYS[1]; the guard (owner or token) has already checked the hold. */
static const char DECR_BODY[] = "return redis.call('DECR', KEYS[1])\n";

static void same_calls(int redlock)
{
    const char *name = redlock ? "al:rl" : "al:redis";
    const char *reads[2] = {redlock ? "al:rl:stock" : "al:redis:stock", "al:none"};
    set_key(reads[0], "7");
    lc_script *s = NULL;
    assert_ok(redlock ? lc_token_fenced_script_new(DECR_BODY, &s)
                      : lc_fenced_script_new(DECR_BODY, &s));
    lc_anylock *a = anylock(redlock, name), *b = anylock(redlock, name);
    assert_string_equal(lc_anylock_kind(a), redlock ? "redlock" : "redis");
    result ra = {0}, rb = {0};

    assert_ok(lc_anylock_acquire(a, 0, 2, reads, on_acquired, &ra));
    assert_status(lc_anylock_acquire(a, 0, 0, NULL, on_acquired, &ra), LC_ESTATE);
    RUN(ra, LC_OK);
    assert_non_null(ra.reply);
    assert_int_equal(ra.reply->elements, 2);
    assert_string_equal(ra.reply->element[0]->str, "7");
    assert_int_equal(ra.reply->element[1]->type, REDIS_REPLY_NIL);
    assert_int_equal(lc_anylock_held(a), 1);
    assert_true(lc_anylock_fence(a) > 0);
    assert_string_equal(lc_anylock_errmsg(a), "");

    assert_ok(lc_anylock_acquire(b, 0, 0, NULL, on_acquired, &rb)); /* one try */
    RUN(rb, LC_EBUSY);
    assert_string_not_equal(lc_anylock_errmsg(b), "");
    reset(&rb);
    assert_ok(lc_anylock_acquire(b, 10000, 0, NULL, on_acquired, &rb)); /* waits */
    lt_run_until(lt_never, NULL, 100);
    assert_int_equal(rb.calls, 0);

    reset(&ra);
    const char *keys[1] = {reads[0]};
    assert_ok(lc_anylock_eval(a, s, LC_EVAL_RELEASE, 1, keys, 0, NULL, on_eval, &ra));
    RUN(ra, LC_OK);
    assert_int_equal(ra.reply->integer, 6);
    assert_int_equal(lc_anylock_held(a), 0);
    RUN_ENDED(rb, LC_OK); /* the release in the commit handed the lock on */

    reset(&rb);
    assert_ok(lc_anylock_release(b, on_eval, &rb));
    RUN(rb, LC_OK);
    assert_int_equal(lc_anylock_held(b), 0);
    assert_status(lc_anylock_eval_detached(b, s, 1, keys, 0, NULL, on_reply, &rb), LC_ENOTHELD);

    reset(&ra);
    reset(&rb);
    lc_anylock_free(a);
    lc_anylock_free(b);
    lc_script_free(s);
}

static void test_same_calls_redis(void **state)
{
    (void)state;
    same_calls(0);
}

static void test_same_calls_redlock(void **state)
{
    (void)state;
    same_calls(1);
}

/* 1 once every node's al:empty:fence is at least the seen token given (a string) */
static int nodes_raised(void *arg)
{
    for (int i = 0; i < LT_NODES; i++) {
        char buf[32];
        if (rf_string(nodes.srv[i], buf, sizeof buf, "GET al:empty:fence") != 1 ||
            strtoull(buf, NULL, 10) < strtoull(arg, NULL, 10))
            return 0;
    }
    return 1;
}

/* The detached commit of a token-fenced backend (the one fenced-eval helper, outside the
 * handle's operation): the store has seen a later token than the nodes hand out (nodes
 * emptied), so it is refused with LC_ELOST and the nodes' counters are raised past the seen
 * token; the next holder's commit is accepted. */
static void test_detached_refused_raises(void **state)
{
    (void)state;
    const char *seen = "8589934597";
    set_key("al:empty:seen", seen);
    set_key("al:empty:stock", "5");
    lc_script *s = NULL;
    assert_ok(lc_token_fenced_script_new(DECR_BODY, &s));
    lc_anylock *a = anylock(1, "al:empty");
    result r = {0};
    assert_ok(lc_anylock_acquire(a, 0, 0, NULL, on_acquired, &r));
    RUN(r, LC_OK);
    assert_true(lc_anylock_fence(a) < 100);
    reset(&r);
    const char *keys[1] = {"al:empty:stock"};
    assert_ok(lc_anylock_eval_detached(a, s, 1, keys, 0, NULL, on_reply, &r));
    RUN(r, LC_ELOST);
    assert_true(lt_run_until(nodes_raised, (void *)seen, 5000));
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET al:empty:stock"), 1);
    assert_string_equal(buf, "5"); /* nothing ran */

    lc_anylock_free(a); /* released in the background */
    a = anylock(1, "al:empty");
    reset(&r);
    assert_ok(lc_anylock_acquire(a, 5000, 0, NULL, on_acquired, &r));
    RUN(r, LC_OK);
    assert_true(lc_anylock_fence(a) > 8589934597ULL);
    reset(&r);
    assert_ok(lc_anylock_eval_detached(a, s, 1, keys, 0, NULL, on_reply, &r));
    RUN(r, LC_OK);
    assert_int_equal(r.reply->integer, 4);
    reset(&r);
    lc_anylock_free(a);
    lc_script_free(s);
}

static int no_key(void *arg) /* arg: the key (const char *) */
{
    return lt_nodes_with_key(&nodes, arg) == 0;
}

/* A Redlock handle closed before its node clients go: the hold is released, an acquire in
 * flight ends with LC_ESTATE, later calls answer LC_ESTATE and the lock reads as lost. A Redis
 * lock is not closed (it lives on the store): close leaves it working. */
static void test_close(void **state)
{
    (void)state;
    lc_anylock *a = anylock(1, "al:close"), *b = anylock(1, "al:close");
    result ra = {0}, rb = {0};
    assert_ok(lc_anylock_acquire(a, 0, 0, NULL, on_acquired, &ra));
    RUN(ra, LC_OK);
    assert_ok(lc_anylock_acquire(b, 10000, 0, NULL, on_acquired, &rb));
    lc_anylock_close(b);
    assert_int_equal(rb.calls, 1); /* from inside the close */
    assert_int_equal(rb.st, LC_ESTATE);
    lc_anylock_close(a);
    assert_int_equal(lc_anylock_lost(a), 1);
    assert_int_equal(lc_anylock_held(a), 0);
    reset(&ra);
    assert_status(lc_anylock_acquire(a, 0, 0, NULL, on_acquired, &ra), LC_ESTATE);
    assert_true(lt_run_until(no_key, (void *)"al:close", 5000));
    lc_anylock_free(a);
    lc_anylock_free(b);
    reset(&rb);

    lc_anylock *r = anylock(0, "al:close");
    lc_anylock_close(r);
    assert_ok(lc_anylock_acquire(r, 0, 0, NULL, on_acquired, &ra));
    RUN(ra, LC_OK);
    reset(&ra);
    lc_anylock_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_same_calls_redis, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_calls_redlock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detached_refused_raises, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, gf_group_teardown);
}
