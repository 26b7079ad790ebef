/*
 * The client (client.c), top of the connection layer: the pool of connections or the
 * multiplexer that carries every command of the blocking face, and a few slots for the
 * services that upper layers run for a client (the watchdog, the unlock listener). The client
 * starts none of them and knows none of them: whoever needs one asks for it here, and the client
 * only stops them when it is freed. Not public API.
 */
#ifndef LOCKCORE_CLIENT_INTERNAL_H
#define LOCKCORE_CLIENT_INTERNAL_H

#include "conn_internal.h"

/* Non-zero while this thread runs lockcore's asynchronous code from an event loop (async.c sets
 * it): a blocking call there would stall the loop, which lc_exec asserts against in debug
 * builds. */
extern _Thread_local int lc_in_loop;

/* Runs n commands on the client: through the multiplexed connection, or pipelined on a pooled
 * one. LC_OK (replies, new, caller frees, may be error replies) or an error with every reply
 * NULL. *sent (when sent is non-NULL) is 1 when the commands were written to a connection, so
 * a failure may have left them running on the server, and 0 when they never left this process. */
lc_status lc_exec(lc_client *client, int n, const int *argcs, const char **const *argvs,
                  const size_t *const *lens, redisReply **replies, int *sent);

/* The client's endpoint (borrowed: valid until lc_client_free), for the services that open
 * connections of their own. */
const lc_endpoint *lc_client_endpoint(const lc_client *client);

/* A kind of service an upper layer runs for a client, one instance per client: defined by that
 * layer (a static const), known to the client only through these two functions. */
typedef struct lc_service {
    /* A new instance for client, or NULL when it cannot start (it is asked again next time). */
    void *(*start)(lc_client *client);
    /* Stops the instance's threads and frees it; called once, by lc_client_free. */
    void (*stop)(void *instance);
} lc_service;

enum { LC_CLIENT_SERVICES_MAX = 4 };

/* The client's instance of kind, started on the first call (by one thread; the others wait for
 * it). NULL when it could not be started. Borrowed: it lives until lc_client_free stops it, in
 * the reverse order of starting. */
void *lc_client_service(lc_client *client, const lc_service *kind);

/* The client's instance of kind if one was started, else NULL; never starts one. */
void *lc_client_service_running(lc_client *client, const lc_service *kind);

#endif
