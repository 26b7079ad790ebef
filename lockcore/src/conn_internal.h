/*
 * Opening a connection (conn.c), the lowest piece of the connection layer: where and how to
 * connect, and the one function that does it for the pool, the multiplexer, the watchdog and
 * the unlock listener alike. Nothing here is part of the public API.
 */
#ifndef LOCKCORE_CONN_INTERNAL_H
#define LOCKCORE_CONN_INTERNAL_H

#include <hiredis/hiredis.h>

#include "base_internal.h"

/* Where and how a client connects: its parsed URL and its options. Owned by the client, which
 * never changes it after lc_client_new: whoever connects for the client borrows it. */
typedef struct lc_endpoint {
    lc_url url;
    lc_client_opts opts;
} lc_endpoint;

/* Opens a new connection to ep (connect, AUTH, SELECT, command timeout, keep-alive) into *out:
 * LC_OK, LC_ENOMEM, LC_EIO or LC_EREDIS (auth/select refused), with lc_errmsg set. */
lc_status lc_connect(const lc_endpoint *ep, redisContext **out);

#endif
