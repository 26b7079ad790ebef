/*
 * The application state every handler gets: the effective configuration, the Redis store, the
 * per-instance SKU cache and who the users are (identity.h). One per process; made by app_init in
 * main.c's start-up.
 */
#ifndef INVENTORY_APP_H
#define INVENTORY_APP_H

#include <stdatomic.h>
#include <stddef.h>

#include "config.h"

struct store;
struct skucache;
struct identity;

struct app {
    struct config cfg;
    struct store *store;       /* Redis access: scripts and keys (store.h) */
    struct skucache *cache;    /* what this instance knows of each SKU (version, empty segments) */
    struct identity *identity; /* who sends an order; the confirm token (identity.h) */
    struct statsnap *snaps;    /* the stock status snapshots (statsnap.h) */
    atomic_int draining;       /* 1 once shutdown began */
};

/* Fills app from cfg and makes the store, the cache and the identity (which reads
 * jwt_key_file and confirm_token_file: a file it cannot use fails the start). Redis need not be
 * up: nothing connects here (each worker loop's client connects on demand). 0, or -1 with err
 * set. */
int app_init(struct app *app, const struct config *cfg, char *err, size_t errlen);

/* Frees what app_init made. NULL-safe. */
void app_free(struct app *app);

#endif
