/*
 * The application state every handler gets: the effective configuration, the Redis store, the
 * per-instance SKU cache and who the users are (identity.h). One per process; made by app_init
 * (server.h) in main.c's start-up.
 */
#ifndef INVENTORY_APP_H
#define INVENTORY_APP_H

#include <stdatomic.h>
#include <stddef.h>

#include "config.h"

struct store;
struct skucache;
struct identity;

struct ticket_key;
struct gate;

struct userrate;

struct app {
    struct config cfg;
    struct store *store;       /* Redis access: scripts and keys (store.h) */
    struct skucache *cache;    /* what this instance knows of each SKU (version, empty segments) */
    struct identity *identity; /* who sends an order; the confirm token (identity.h) */
    struct statsnap *snaps;    /* the stock status snapshots (statsnap.h) */
    struct ticket_key *queue_key; /* --queue-key-file: signs tickets (ticket.h); len 0: none */
    struct gate *gate;            /* the waiting rooms as this instance sees them (gate.h) */

    struct userrate *user_rate; /* --user-rps: the per-user request rate (userrate.h); NULL
                                   when off */
    atomic_int draining;        /* 1 once shutdown began */
};

#endif
