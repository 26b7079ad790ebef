/*
 * Five independent redis-server processes for the Redlock tests (header-only, static inline):
 * started on free ports by the group setup, stopped by the group teardown (gf_group_teardown;
 * on any failure or signal, by the fixtures' process registry), put back in shape before each test
 * (resumed, restarted, flushed), plus checks of a lock across the nodes.
 */
#ifndef LC_TESTS_LT_NODES_H
#define LC_TESTS_LT_NODES_H

#include "lc_test.h"

#define LT_NODES GF_NODES

typedef struct lt_nodes {
    rf_server *srv[LT_NODES];
    const char *urls[LT_NODES];
    int paused[LT_NODES];
} lt_nodes;

/* Starts the five servers with the extra args (NULL-terminated, may be NULL) as the group's
 * nodes (group_fixture.h: gf_group_teardown stops them). 0 or -1. */
static inline int lt_nodes_start(lt_nodes *n, const char *const *extra)
{
    memset(n, 0, sizeof(*n));
    if (gf_start_nodes(extra) != 0)
        return -1;
    for (int i = 0; i < LT_NODES; i++) {
        n->srv[i] = gf_node[i];
        n->urls[i] = gf_node_url[i];
    }
    return 0;
}

static inline void lt_node_pause(lt_nodes *n, int i)
{
    assert_int_equal(rf_pause(n->srv[i]), 0);
    n->paused[i] = 1;
}

static inline void lt_node_resume(lt_nodes *n, int i)
{
    if (n->paused[i])
        assert_int_equal(rf_resume(n->srv[i]), 0);
    n->paused[i] = 0;
}

/* kill -9 of node i (its data goes unless persistence kept it). */
static inline void lt_node_crash(lt_nodes *n, int i)
{
    lt_node_resume(n, i);
    assert_int_equal(rf_halt(n->srv[i], SIGKILL), 0);
}

static inline void lt_node_restart(lt_nodes *n, int i)
{
    lt_node_resume(n, i);
    assert_int_equal(rf_restart(n->srv[i]), 0);
}

/* Per-test setup: every node running, not paused, and empty. 0 or -1. */
static inline int lt_nodes_reset(lt_nodes *n)
{
    for (int i = 0; i < LT_NODES; i++) {
        if (n->paused[i] && rf_resume(n->srv[i]) != 0)
            return -1;
        n->paused[i] = 0;
        if (rf_pid(n->srv[i]) == 0 && rf_restart(n->srv[i]) != 0)
            return -1;
        if (rf_flushall(n->srv[i]) != 0)
            return -1;
    }
    return 0;
}

/* Nodes (running, not paused) on which the lock called name is held by owner token. */
static inline int lt_nodes_owned(lt_nodes *n, const char *name, const char *token)
{
    int k = 0;
    char buf[64];
    for (int i = 0; i < LT_NODES; i++)
        if (!n->paused[i] && rf_pid(n->srv[i]) != 0 &&
            strcmp(lt_owner(n->srv[i], name, buf, sizeof buf), token) == 0)
            k++;
    return k;
}

/* Nodes (running, not paused) on which the key exists. */
static inline int lt_nodes_with_key(lt_nodes *n, const char *key)
{
    int k = 0;
    for (int i = 0; i < LT_NODES; i++)
        if (!n->paused[i] && rf_pid(n->srv[i]) != 0 && rf_integer(n->srv[i], "EXISTS %s", key) == 1)
            k++;
    return k;
}

/* Redlock options for the tests: generous node timeouts (a loaded machine), short retries. */
static inline lc_redlock_opts lt_redlock_opts(int lease_ms, int watchdog)
{
    lc_redlock_opts o;
    lc_redlock_opts_init(&o);
    o.lease_ms = lease_ms;
    o.watchdog = watchdog;
    o.node_timeout_ms = 500;
    o.retry_delay_ms = 20;
    return o;
}

#endif /* LC_TESTS_LT_NODES_H */
