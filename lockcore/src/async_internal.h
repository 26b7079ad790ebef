/*
 * Private declarations of the asynchronous face (async.c, async_libevent.c). Not public API.
 */
#ifndef LOCKCORE_ASYNC_INTERNAL_H
#define LOCKCORE_ASYNC_INTERNAL_H

#include <hiredis/async.h>

#include "lockcore/lockcore_async.h"

struct event_base;

/* Attaches ac to base with lockcore's adapter (async_libevent.c). 0, or -1 (out of memory or
 * already attached). */
int lc_ev_attach(redisAsyncContext *ac, struct event_base *base, lc_async_client *client);

/* Bracket every entry from the loop into lockcore's code: a client freed in between is freed
 * by the outermost leave. */
void lc_async_enter(lc_async_client *client);
void lc_async_leave(lc_async_client *client);

/* The loop the client was made on (for timers of objects built on the client: redlock_async.c). */
struct event_base *lc_async_client_base(const lc_async_client *client);

/* For the tests: unlock messages that woke a waiter, waiters sleeping (subscribed, waiting for
 * an unlock) on the lock called name, and whether the data connection is up. */
long lc_async_debug_wakeups(const lc_async_client *client);
int lc_async_debug_sleepers(const lc_async_client *client, const char *name);
int lc_async_debug_connected(const lc_async_client *client);
/* The port the subscriber connection is up on (-1 while down), and how many times the
 * liveness probe dropped it. */
int lc_async_debug_sub_port(const lc_async_client *client);
long lc_async_debug_sub_drops(const lc_async_client *client);

/* Cluster mode: what the routing did so far (redirections followed, CLUSTER SLOTS sent and
 * those that changed the map) and how many slots the map knows now. All 0 for one Redis. */
typedef struct lc_cluster_stats {
    long moved, ask, tryagain, clusterdown, refreshes, refresh_changes;
    int known_slots;
} lc_cluster_stats;
void lc_async_debug_cluster(const lc_async_client *client, lc_cluster_stats *out);
/* The port of the master the map names for slot, or -1 (unknown, or one Redis). */
int lc_async_debug_slot_port(const lc_async_client *client, int slot);

#endif
