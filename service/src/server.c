/*
 * server — start-up and shutdown order of inventoryd (server.h). Start: every loop made
 * (worker_init, with the order path's per-loop part) and the HTTP edge attached to it, then the
 * sweeper (on loop 0) and the event streams (every loop), then the loops' threads, then the
 * sweeper's first run posted to loop 0. Stop: quiesce every loop (no new connection), wait for
 * the requests in flight up to the grace, cut (answer what still waits), end (loop 0 stops the
 * sweeper first), join, then free in the reverse order of making.
 */
#include "server.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lockcore/lockcore_async.h>

#include "app.h"
#include "clock.h"
#include "events.h"
#include "gate.h"
#include "http.h"
#include "identity.h"
#include "log.h"
#include "metrics.h"
#include "order_loop.h"
#include "skucache.h"
#include "statsnap.h"
#include "store.h"
#include "sweep.h"
#include "ticket.h"

#include "userrate.h"
#include "worker.h"

/* ---- the application state (app.h): made before the server starts, freed after it stopped ---- */

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
    app->gate = gate_new(app);
    if (!app->cache || !app->snaps || !app->gate) {
        snprintf(err, errlen, "out of memory");
        app_free(app);
        return -1;
    }
    if (identity_new(cfg, &app->identity, err, errlen) != 0) {
        app_free(app);
        return -1;
    }
    app->queue_key = calloc(1, sizeof(*app->queue_key));
    if (!app->queue_key) {
        snprintf(err, errlen, "out of memory");
        app_free(app);
        return -1;
    }
    if (cfg->queue_key_file[0] &&
        ticket_key_load(app->queue_key, cfg->queue_key_file, err, errlen) != 0) {
        app_free(app);
        return -1;
    }

    if (cfg->user_rps > 0 && !(app->user_rate = userrate_new(cfg->user_rps))) {
        snprintf(err, errlen, "user_rps: out of memory");
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
    gate_free(app->gate);
    app->gate = NULL;
    identity_free(app->identity);
    ticket_key_wipe(app->queue_key);
    free(app->queue_key);
    app->queue_key = NULL;

    userrate_free(app->user_rate);
    app->user_rate = NULL;
    app->store = NULL;
    app->cache = NULL;
    app->snaps = NULL;
    app->identity = NULL;
}

/* ---- the server ---- */

struct server {
    struct app *app;
    struct worker *workers;
    int nloops;
    int nworkers; /* made (worker_init), of nloops */
    struct http_server *http;
    struct sweep *sweep;   /* the expiry sweeper, on the first loop (sweep.h) */
    struct events *events; /* the status event streams of every loop (events.h) */
};

/* The sweeper, the waiting rooms' admitter (gate.h) and the per-user rate's flusher
 * (userrate.h) run on the first loop: started there, stopped before its Redis client goes. */
static void on_start_sweep(void *arg)
{
    struct server *s = arg;
    sweep_start(s->sweep);
    if (gate_start(s->app->gate, &s->workers[0].env) != 0)
        log_msg(CONFIG_LOG_ERROR, "queue_admitter",
                "the waiting rooms' admitter could not start (out of memory): no place is "
                "admitted by this instance");
    if (userrate_start(s->app->user_rate, s->workers[0].env.base, s->workers[0].env.lc) != 0)
        log_msg(CONFIG_LOG_ERROR, "user_rate",
                "the per-user rate's flusher did not start: each instance counts alone");
}

static void on_end_sweep(void *arg)
{
    struct server *s = arg;
    userrate_stop(s->app->user_rate);
    sweep_stop(s->sweep);
    gate_stop(s->app->gate);
}

/* Frees what was made, the loops having ended (or never run). */
static void server_free(struct server *s)
{
    sweep_free(s->sweep);
    for (int i = 0; i < s->nworkers; i++)
        events_loop_close(s->events, i); /* before the loops' bases go (a no-op once ended) */
    http_free(s->http);                  /* our daemons, before their loops' bases */
    for (int i = 0; i < s->nworkers; i++)
        worker_free(&s->workers[i]);
    events_free(s->events);
    free(s->workers);
    free(s);
}

/* Makes the loops and attaches the HTTP edge to each. 0, or -1 with err set. */
static int loops_make(struct server *s, char *err, size_t errlen)
{
    const struct config *cfg = &s->app->cfg;
    lc_client_opts lo;
    lc_client_opts_init(&lo);
    lo.connect_timeout_ms = cfg->redis_timeout_ms;
    lo.command_timeout_ms = cfg->redis_timeout_ms;
    for (int i = 0; i < s->nloops; i++) {
        struct worker *w = &s->workers[i];
        s->nworkers++;
        if (worker_init(w, i, s->nloops, cfg, &lo, &order_loop_hooks, err, errlen) != 0 ||
            http_attach(s->http, w, err, errlen) != 0)
            return -1;
    }
    return 0;
}

struct server *server_start(struct app *app, char *err, size_t errlen)
{
    struct server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->app = app;
    s->nloops = app->cfg.threads > 0 ? app->cfg.threads : 1;
    if (!(s->http = http_new(app, err, errlen)))
        goto fail;
    if (!(s->workers = calloc((size_t)s->nloops, sizeof(*s->workers)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (loops_make(s, err, errlen) != 0)
        goto fail;
    if (!(s->sweep = sweep_new(app, &s->workers[0].env))) {
        snprintf(err, errlen, "expiry sweeper: out of memory");
        goto fail;
    }
    if (!(s->events = events_new(app, s->workers, s->nloops))) {
        snprintf(err, errlen, "event streams: out of memory");
        goto fail;
    }
    http_events(s->http, s->events);
    s->workers[0].on_end = on_end_sweep;
    s->workers[0].on_end_arg = s;
    for (int i = 0; i < s->nloops; i++) {
        if (worker_start(&s->workers[i]) != 0) {
            snprintf(err, errlen, "cannot start event loop %d", i);
            for (int j = 0; j < i; j++) {
                worker_end(&s->workers[j]);
                worker_join(&s->workers[j]);
            }
            goto fail;
        }
    }
    worker_post(&s->workers[0], on_start_sweep, s);
    return s;
fail:
    server_free(s);
    return NULL;
}

int server_port(const struct server *s)
{
    return s ? http_port(s->http) : 0;
}

void server_stop(struct server *s, int grace_ms)
{
    if (!s)
        return;
    for (int i = 0; i < s->nworkers; i++)
        worker_quiesce(&s->workers[i]);
    int64_t start_us = clock_mono_us();
    while (http_in_flight(s->http) > 0 && clock_mono_us() - start_us < (int64_t)grace_ms * 1000) {
        struct timespec tick = {0, 5 * 1000000L};
        nanosleep(&tick, NULL);
    }
    int left = http_in_flight(s->http);
    if (left > 0)
        log_msg(CONFIG_LOG_WARN, "shutdown", "%d request(s) still in flight after %d ms; closing",
                left, grace_ms);
    /* Answer what is still suspended, then end the loops. */
    for (int i = 0; i < s->nworkers; i++)
        worker_cut(&s->workers[i]);
    for (int i = 0; i < s->nworkers; i++)
        worker_end(&s->workers[i]);
    for (int i = 0; i < s->nworkers; i++)
        worker_join(&s->workers[i]);
    server_free(s);
}
