/*
 * Redlock's fencing token against five persistent redis-servers (AOF, fsync always) that are
 * killed with SIGKILL and restarted between acquisitions: every holder's token is above every
 * earlier holder's, also when the nodes' counters have drifted apart (a minority of nodes that
 * saw more failed attempts than the others) and the next majority shares only one node with
 * the last one. And the point of the token: a data store that checks it with
 * LC_LUA_FENCE_ACCEPT refuses the write of a holder whose lease ran out after a later holder
 * wrote.
 */
#include "lt_nodes.h"

static lt_nodes nodes;

static const char *const PERSIST[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};

/* The five lock nodes, and the data store (gf_redis), not one of them. */
static int group_setup(void **state)
{
    (void)state;
    return lt_nodes_start(&nodes, PERSIST) == 0 && gf_start(NULL, NULL) == 0 ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    return lt_nodes_reset(&nodes) == 0 && rf_flushall(gf_redis) == 0 ? 0 : -1;
}

static lc_redlock_client *rclient(void)
{
    lc_redlock_client *rc = NULL;
    assert_ok(lc_redlock_client_new(LT_NODES, nodes.urls, NULL, &rc));
    return rc;
}

/* Kills the nodes in down[] (SIGKILL: only the AOF keeps their data) and restarts all others. */
static void nodes_only_up(const int down[LT_NODES])
{
    for (int i = 0; i < LT_NODES; i++) {
        if (down[i]) {
            if (rf_pid(nodes.srv[i]) != 0)
                lt_node_crash(&nodes, i);
        } else {
            if (rf_pid(nodes.srv[i]) != 0)
                lt_node_crash(&nodes, i);
            lt_node_restart(&nodes, i);
        }
    }
}

static long long counter(int i, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "%s:fence", name);
    return lt_get_ll(nodes.srv[i], key);
}

/* The construction where "the maximum over a majority" alone would go backwards: node 2's
 * counter is ahead after failed attempts; A's majority {0,1,2} takes its value; B's majority
 * {0,3,4} shares only node 0 with A's. The token is written back to A's majority, so B's is
 * larger. Every node is killed and restarted (AOF) in between. */
static void test_diverged_counters(void **state)
{
    (void)state;
    const char *name = "rlf:div";
    lc_redlock_opts o = lt_redlock_opts(10000, 0);
    lc_redlock_client *rc;
    lc_redlock *h = NULL;

    /* Only node 2 up: five refused attempts move its counter alone. */
    nodes_only_up((const int[LT_NODES]){1, 1, 0, 1, 1});
    rc = rclient(); /* a fresh client per topology: no reconnect back-off in the way */
    assert_ok(lc_redlock_new(rc, name, &o, NULL, NULL, &h));
    for (int k = 0; k < 5; k++)
        assert_status(lc_redlock_acquire(h, 0, NULL), LC_EIO);
    assert_int_equal(counter(2, name), 5);
    assert_int_equal(lt_nodes_with_key(&nodes, name), 0); /* every attempt undone */
    lc_redlock_free(h);
    lc_redlock_client_free(rc);

    /* A gets {0, 1, 2}: counters 1, 1, 6 -> token 6, raised on 0 and 1. */
    nodes_only_up((const int[LT_NODES]){0, 0, 0, 1, 1});
    uint64_t ta = 0, tb = 0;
    rc = rclient();
    assert_ok(lc_redlock_new(rc, name, &o, NULL, NULL, &h));
    assert_ok(lc_redlock_acquire(h, 5000, &ta));
    assert_int_equal(ta, 6);
    for (int i = 0; i < 3; i++)
        assert_int_equal(counter(i, name), 6);
    assert_ok(lc_redlock_release(h));
    lc_redlock_free(h);
    lc_redlock_client_free(rc);

    /* B gets {0, 3, 4} after every node was killed and restarted: node 0 carries 6. Without
     * the write-back its counter would be 1, and B's token max(2, 1, 1) = 2 < 6. */
    nodes_only_up((const int[LT_NODES]){0, 1, 1, 0, 0});
    rc = rclient();
    assert_ok(lc_redlock_new(rc, name, &o, NULL, NULL, &h));
    assert_ok(lc_redlock_acquire(h, 5000, &tb));
    assert_int_equal(tb, 7);
    assert_ok(lc_redlock_release(h));
    lc_redlock_free(h);
    lc_redlock_client_free(rc);
}

/* Rounds of: a random minority of nodes killed, the rest (re)started from their AOF, one holder
 * acquires on whatever majority is up. Tokens strictly increase across all holders. */
static void test_restarts_between_holders(void **state)
{
    (void)state;
    const char *name = "rlf:rounds";
    enum { ROUNDS = 12 };
    lc_redlock_opts o = lt_redlock_opts(10000, 0);
    uint64_t last = 0;
    srand(12345);
    for (int r = 0; r < ROUNDS; r++) {
        if (r % 3 == 1) {
            /* Only two nodes up: refused attempts move their counters alone. */
            int down[LT_NODES] = {1, 1, 1, 1, 1};
            down[rand() % LT_NODES] = 0;
            down[rand() % LT_NODES] = 0;
            nodes_only_up(down);
            lc_redlock_client *minor = rclient();
            lc_redlock *x = NULL;
            assert_ok(lc_redlock_new(minor, name, &o, NULL, NULL, &x));
            for (int k = rand() % 4; k >= 0; k--)
                assert_status(lc_redlock_acquire(x, 0, NULL), LC_EIO);
            lc_redlock_free(x);
            lc_redlock_client_free(minor);
        }
        int down[LT_NODES] = {0};
        for (int k = rand() % 3; k > 0; k--) /* 0..2 nodes down */
            down[rand() % LT_NODES] = 1;
        nodes_only_up(down);
        lc_redlock_client *rc = rclient(); /* fresh connections to the restarted nodes */
        lc_redlock *h = NULL;
        assert_ok(lc_redlock_new(rc, name, &o, NULL, NULL, &h));
        uint64_t t = 0;
        assert_ok(lc_redlock_acquire(h, 8000, &t));
        if (t <= last)
            fail_msg("round %d: token %llu after %llu", r, (unsigned long long)t,
                     (unsigned long long)last);
        last = t;
        /* A majority carries the token. */
        int carry = 0;
        for (int i = 0; i < LT_NODES; i++)
            carry += !down[i] && counter(i, name) >= (long long)t;
        assert_true(carry >= LT_NODES / 2 + 1);
        assert_ok(lc_redlock_release(h));
        lc_redlock_free(h);
        lc_redlock_client_free(rc);
    }
}

/* Writes value to KEYS[2] if ARGV[1] is at least the highest token seen at KEYS[1]. */
static const char STORE_WRITE[] = "if not lc_fence_accept(KEYS[1], ARGV[1]) then return 0 end\n"
                                  "redis.call('SET', KEYS[2], ARGV[2])\n"
                                  "return 1\n";

static long long store_write(lc_client *c, lc_script *s, uint64_t token, const char *value)
{
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)token);
    const char *keys[2] = {"seg:{1}:seen", "seg:{1}:stock"};
    const char *args[2] = {t, value};
    redisReply *r = NULL;
    assert_ok(lc_script_run(c, s, 2, keys, NULL, 2, args, NULL, &r));
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* A paused holder whose lease ran out comes back after a later holder wrote: refused. */
static void test_store_refuses_stale_holder(void **state)
{
    (void)state;
    lc_redlock_client *rc = rclient();
    lc_redlock_opts oa = lt_redlock_opts(400, 0); /* no watchdog: A's lease runs out */
    lc_redlock_opts ob = lt_redlock_opts(10000, 0);
    lc_redlock *a = NULL, *b = NULL;
    assert_ok(lc_redlock_new(rc, "rlf:store", &oa, NULL, NULL, &a));
    assert_ok(lc_redlock_new(rc, "rlf:store", &ob, NULL, NULL, &b));
    char *src = malloc(strlen(LC_LUA_FENCE_ACCEPT) + sizeof STORE_WRITE);
    assert_non_null(src);
    strcpy(src, LC_LUA_FENCE_ACCEPT);
    strcat(src, STORE_WRITE);
    lc_script *s = NULL;
    assert_ok(lc_script_new(src, &s));
    free(src);
    lc_client *c = lt_client(rf_url(gf_redis));

    uint64_t ta = 0, tb = 0;
    assert_ok(lc_redlock_try(a, &ta));
    assert_int_equal(store_write(c, s, ta, "a1"), 1);
    /* A "pauses" past its lease; B takes the lock and writes. */
    assert_ok(lc_redlock_acquire(b, 5000, &tb));
    assert_true(tb > ta);
    assert_int_equal(store_write(c, s, tb, "b1"), 1);
    /* A wakes up and writes with its old token: refused, B's value stays. */
    assert_int_equal(store_write(c, s, ta, "a2"), 0);
    char buf[16];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "GET seg:{1}:stock"), 1);
    assert_string_equal(buf, "b1");
    assert_int_equal(store_write(c, s, tb, "b2"), 1); /* the holder itself, again */
    assert_status(lc_redlock_release(a), LC_ELOST);
    assert_ok(lc_redlock_release(b));
    lc_client_free(c);
    lc_script_free(s);
    lc_redlock_free(a);
    lc_redlock_free(b);
    lc_redlock_client_free(rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_diverged_counters, setup),
        cmocka_unit_test_setup(test_restarts_between_holders, setup),
        cmocka_unit_test_setup(test_store_refuses_stale_holder, setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gf_group_teardown);
}
