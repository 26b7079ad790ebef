/*
 * Application state: the configuration, the store, the SKU cache, the status snapshots and the
 * identity; see app.h.
 */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "identity.h"
#include "metrics.h"
#include "skucache.h"
#include "statsnap.h"
#include "store.h"

int app_init(struct app *app, const struct config *cfg, char *err, size_t errlen)
{
    memset(app, 0, sizeof(*app));
    app->cfg = *cfg;
    atomic_init(&app->draining, 0);
    metrics_set_order_redis_call_budget(cfg->order_redis_call_budget);
    if (store_new(cfg, &app->store, err, errlen) != 0)
        return -1;
    app->cache = skucache_new(cfg->sold_out_recheck_ms);
    app->snaps = statsnap_new(cfg->status_refresh_ms);
    if (!app->cache || !app->snaps) {
        snprintf(err, errlen, "out of memory");
        app_free(app);
        return -1;
    }
    if (identity_new(cfg, &app->identity, err, errlen) != 0) {
        app_free(app);
        return -1;
    }
    return 0;
}

void app_free(struct app *app)
{
    if (!app)
        return;
    store_free(app->store);
    skucache_free(app->cache);
    statsnap_free(app->snaps);
    identity_free(app->identity);
    app->store = NULL;
    app->cache = NULL;
    app->snaps = NULL;
    app->identity = NULL;
}
