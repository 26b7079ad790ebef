/*
 * The Redlock fixture of the asynchronous tests (header-only, static inline): the five lock
 * nodes (lt_nodes.h) and the data store apart from them (the group's gf_redis), each with a
 * client on the test's loop (lt_loop.h). it_redlock_async and it_anylock use it.
 */
#ifndef LC_TESTS_LT_ASYNC_NODES_H
#define LC_TESTS_LT_ASYNC_NODES_H

#include "lt_loop.h"
#include "lt_nodes.h"

#include "lockcore/lockcore_async.h"

/* Group setup: the five nodes and the data store. 0 or -1. */
static inline int lt_async_nodes_start(lt_nodes *n)
{
    return lt_nodes_start(n, NULL) == 0 && gf_start(NULL, NULL) == 0 ? 0 : -1;
}

/* Per-test setup: every node back in shape and empty, a new loop, a client of it on each node
 * (cl) and on the data store, emptied (store). 0 or -1. */
static inline int lt_async_nodes_open(lt_nodes *n, lc_async_client *cl[LT_NODES],
                                      lc_async_client **store)
{
    if (lt_nodes_reset(n) != 0 || lt_loop_start() != 0)
        return -1;
    for (int i = 0; i < LT_NODES; i++)
        if (lc_async_client_new(lt_base, n->urls[i], NULL, &cl[i]) != LC_OK)
            return -1;
    if (rf_flushall(gf_redis) != 0 ||
        lc_async_client_new(lt_base, rf_url(gf_redis), NULL, store) != LC_OK)
        return -1;
    return 0;
}

/* Per-test teardown: the clients, then the loop. */
static inline void lt_async_nodes_close(lc_async_client *cl[LT_NODES], lc_async_client **store)
{
    for (int i = 0; i < LT_NODES; i++) {
        lc_async_client_free(cl[i]);
        cl[i] = NULL;
    }
    lc_async_client_free(*store);
    *store = NULL;
    lt_loop_stop();
}

#endif /* LC_TESTS_LT_ASYNC_NODES_H */
