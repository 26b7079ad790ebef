/*
 * The multiplexed connection (mux.c): one connection and one I/O thread that carry the commands
 * of every thread of a client made with lc_client_opts.pipeline = 1. A connection-level piece:
 * it knows the endpoint it connects to, not the client that owns it. Not public API.
 */
#ifndef LOCKCORE_MUX_INTERNAL_H
#define LOCKCORE_MUX_INTERNAL_H

#include "conn_internal.h"

typedef struct lc_mux lc_mux;

/* Starts a multiplexer for ep, which it borrows (ep must outlive it): its I/O thread connects
 * on the first command. LC_OK with *out to free with lc_mux_free, or LC_ENOMEM. */
lc_status lc_mux_new(const lc_endpoint *ep, lc_mux **out);

/* Fails every command still queued or in flight with LC_EIO, stops the thread, closes the
 * connection and frees m. NULL-safe. */
void lc_mux_free(lc_mux *m);

/* Sends n commands through the multiplexed connection and waits for their replies (new,
 * caller frees). LC_OK (replies may be error replies) or LC_EIO (all replies NULL). *sent (when
 * sent is non-NULL) is 1 when the commands were written to a connection, so a failure may have
 * left them running on the server, and 0 when they never left this process (no connection). */
lc_status lc_mux_exec(lc_mux *m, int n, const int *argcs, const char **const *argvs,
                      const size_t *const *lens, redisReply **replies, int *sent);

#endif
