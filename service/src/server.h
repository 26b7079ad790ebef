/*
 * server — inventoryd running: the event loops (worker.h) with the order path's part on each
 * (order_loop.h), the HTTP edge on every loop (http.h), the status event streams (events.h) and
 * the expiry sweeper on the first loop (sweep.h); started in that order, and stopped in the
 * order the loops' work needs (server_stop). The one place that knows every layer.
 */
#ifndef INVENTORY_SERVER_H
#define INVENTORY_SERVER_H

#include <stddef.h>

struct app;
struct config;
struct server;

/* Fills app from cfg and makes the store, the cache and the identity (which reads
 * jwt_key_file and confirm_token_file: a file it cannot use fails the start). Redis need not be
 * up: nothing connects here (each worker loop's client connects on demand). 0, or -1 with err
 * set. */
int app_init(struct app *app, const struct config *cfg, char *err, size_t errlen);

/* Frees what app_init made. NULL-safe. */
void app_free(struct app *app);

/* Starts serving app (borrowed: it outlives the server) with app->cfg.threads loops. Returns a
 * new server to stop with server_stop, or NULL with a one-line reason in err[0..errlen). */
struct server *server_start(struct app *app, char *err, size_t errlen);

/* The port the server listens on (useful after binding port 0); 0 when unknown. */
int server_port(const struct server *s);

/* Stops the server gracefully: stops accepting connections at once (new connects are refused),
 * lets requests in flight finish for up to grace_ms milliseconds (responses sent meanwhile
 * carry Connection: close when app->draining is set), then answers what still waits, ends the
 * loops (the sweeper first, on its loop, before its Redis client goes), joins their threads and
 * frees everything. NULL-safe. */
void server_stop(struct server *s, int grace_ms);

#endif
