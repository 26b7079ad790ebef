/*
 * handlers — the endpoint functions of router.c's table (SPEC §5), one per row, and what they
 * share with their callbacks.
 *
 * Two shapes. A handler that answers at once (router_run_fn: the dashboard, /healthz,
 * /metrics) reads the parsed request and fills *res with a status and a JSON body (or res->text
 * for non-JSON). A handler that waits on Redis (router_start_fn, the *_async ones) gets an areq
 * (areq.h), starts its work on the loop's asynchronous Redis client and ends with areq_done
 * once ar->res holds the answer. Both run on a worker loop and never block or touch sockets.
 * req->param holds the {sku} or {id} path segment, not validated: checking its characters is
 * the handler's job. By the time a handler runs the router has already checked the method,
 * admin authorisation (for admin rows) and that a body, if any, is application/json.
 *
 *   dashboard.c   dashboard_get, dashboard_queue_get
 *   probe.c       probe_healthz, probe_metrics, probe_readyz_answer
 *   probe_async.c probe_readyz_async
 *   stock.c       stock_put_async, stock_delete_async, stock_restock_async, stock_patch_async
 *   status.c      status_get_run, status_get_async
 *   events.c      events_get_run, events_get_async (events.h)
 *   queue.c       queue_join_async, queue_place_run, queue_place_async, queue_info_async
 *                 (queue.h: the waiting room)

 *   queue_pow.c   queue_challenge_get_async (queue_pow.h)
 *   skulist.c     skulist_get_async
 *   group.c       group_put_async, group_get_async, group_delete_async (group.h)
 *   order_fsm.c   order_create_async
 *   order.c       order_get_async, order_cancel_async, order_confirm_async,
 *                 order_extend_async
 */
#ifndef INVENTORY_HANDLERS_H
#define INVENTORY_HANDLERS_H

#include <lockcore/lockcore.h>

#include "app.h"
#include "request.h"

struct areq;

/* GET /: the live dashboard (200 text/html, the page built into the binary; dashboard.h). */
void dashboard_get(struct app *app, const struct request *req, struct response *res);
/* GET /queue: the buyer's waiting room page (200 text/html, built in as the dashboard; the SKU
 * and the buyer's token are read by the page's script, not here). */
void dashboard_queue_get(struct app *app, const struct request *req, struct response *res);
/* GET /healthz: always 200 {"status":"ok"} (the process answers, even while draining). */
void probe_healthz(struct app *app, const struct request *req, struct response *res);
/* GET /metrics: 200 text/plain; version=0.0.4, the metrics_render() document. */
void probe_metrics(struct app *app, const struct request *req, struct response *res);

/* GET /readyz: one PING on the loop's client; while app->draining 503 at once. */
void probe_readyz_async(struct areq *ar);
/* The /readyz answer from a PING's result: 200 {"status":"ready"}; 503
 * {"status":"unavailable","reason":"redis unavailable"} when it failed (reason, the details,
 * is logged, never sent); LC_ESTATE: 503 {"status":"unavailable","reason":"shutting down"}. */
void probe_readyz_answer(lc_status st, const char *reason, struct response *res);

/* PUT /api/v1/skus/{sku} (admin): (re)initialise a SKU. */
void stock_put_async(struct areq *ar);
/* GET /api/v1/skus/{sku}: the status from this instance's snapshot (status.c): status_get_run
 * when it is fresh (inside the HTTP callback), else status_get_async (after its refresh; the
 * exact read with ?consistent=1: exact.h). */
void status_get_run(struct app *app, const struct request *req, struct response *res);
void status_get_async(struct areq *ar);

/* GET /api/v1/skus: a page of the SKU registry (skulist.c; ?cursor=, ?limit= 1..1000). */
void skulist_get_async(struct areq *ar);
/* DELETE /api/v1/skus/{sku} (admin). */
void stock_delete_async(struct areq *ar);
/* POST /api/v1/skus/{sku}/restock (admin). */
void stock_restock_async(struct areq *ar);
/* PATCH /api/v1/skus/{sku} (admin): change the SKU's sale rules alone (SPEC §11). */
void stock_patch_async(struct areq *ar);

/* POST /api/v1/orders: the order state machine (order_fsm.c). */
void order_create_async(struct areq *ar);
/* GET /api/v1/orders/{id}. */
void order_get_async(struct areq *ar);
/* DELETE /api/v1/orders/{id} (admin): cancel, units go back to stock. */
void order_cancel_async(struct areq *ar);
void order_confirm_async(struct areq *ar);
/* POST /api/v1/orders/{id}/extend (admin or confirm token): a hold's expiry moved later. */
void order_extend_async(struct areq *ar);

#endif
