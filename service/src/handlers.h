/*
 * handlers — the endpoint functions router.c dispatches to (SPEC §5), and the one store call
 * the readiness probe needs.
 *
 * Every handler has the same shape: it reads the parsed request (req->param holds the {sku} or
 * {id} path segment, not validated: checking its characters is the handler's job) and fills
 * *res with a status and a JSON body (or res->text for non-JSON). It never touches sockets.
 * By the time a handler runs the router has already checked the method, admin authorisation
 * (for admin routes) and that a body, if any, is application/json.
 *
 *   stock.c   stock_put, stock_get, stock_delete, stock_restock
 *   order.c   order_create, order_get, order_cancel
 *   probe.c   probe_healthz, probe_readyz, probe_metrics
 *   dashboard.c dashboard_get
 *   store.c   store_ping
 */
#ifndef INVENTORY_HANDLERS_H
#define INVENTORY_HANDLERS_H

#include <stddef.h>

#include "app.h"
#include "request.h"

/* GET /: the live dashboard (200 text/html, the page built into the binary; dashboard.h). */
void dashboard_get(struct app *app, const struct request *req, struct response *res);

/* PUT /api/v1/skus/{sku} (admin): (re)initialise a SKU. */
void stock_put(struct app *app, const struct request *req, struct response *res);
/* GET /api/v1/skus/{sku}: SKU status. */
void stock_get(struct app *app, const struct request *req, struct response *res);
/* DELETE /api/v1/skus/{sku} (admin). */
void stock_delete(struct app *app, const struct request *req, struct response *res);
/* POST /api/v1/skus/{sku}/restock (admin). */
void stock_restock(struct app *app, const struct request *req, struct response *res);

/* POST /api/v1/orders. */
void order_create(struct app *app, const struct request *req, struct response *res);
/* GET /api/v1/orders/{id}. */
void order_get(struct app *app, const struct request *req, struct response *res);
/* DELETE /api/v1/orders/{id} (admin): cancel, units go back to stock. */
void order_cancel(struct app *app, const struct request *req, struct response *res);

/* GET /healthz: always 200 {"status":"ok"} (the process answers). */
void probe_healthz(struct app *app, const struct request *req, struct response *res);
/* GET /readyz: 200 {"status":"ready"} when store_ping succeeds; 503
 * {"status":"unavailable","reason":"redis unavailable"} when it fails (the details are logged,
 * never sent) or {"status":"unavailable","reason":"shutting down"} while app->draining. */
void probe_readyz(struct app *app, const struct request *req, struct response *res);
/* GET /metrics: 200 text/plain; version=0.0.4, the metrics_render() document. */
void probe_metrics(struct app *app, const struct request *req, struct response *res);

/* One round trip to Redis (PING). Returns 0 when Redis answered; otherwise -1 and a short
 * human reason in reason[0..len) (NUL-terminated, no secrets). Implemented in store.c. */
int store_ping(struct store *store, char *reason, size_t len);

/* The /readyz answer from a PING's result: 200 ready, or 503 with the reason logged (LC_ESTATE:
 * shutting down). */
#include <lockcore/lockcore.h>
void probe_readyz_answer(lc_status st, const char *reason, struct response *res);

#endif
