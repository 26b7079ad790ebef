/*
 * The application state every handler gets: the effective configuration, the Redis store and
 * the per-instance SKU cache. One per process; made by app_init in main.c's start-up.
 */
#ifndef INVENTORY_APP_H
#define INVENTORY_APP_H

#include <stdatomic.h>
#include <stddef.h>

#include "config.h"

struct store;
struct skucache;

struct app {
    struct config cfg;
    struct store *store;    /* Redis access: scripts and keys (store.h) */
    struct skucache *cache; /* what this instance knows of each SKU (version, empty segments) */
    atomic_int draining;    /* 1 once shutdown began */
};

/* Fills app from cfg and makes the store and cache. Redis need not be up: nothing connects
 * here (each worker loop's client connects on demand). 0, or -1 with err set. */
int app_init(struct app *app, const struct config *cfg, char *err, size_t errlen);

/* Frees what app_init made. NULL-safe. */
void app_free(struct app *app);

#endif
