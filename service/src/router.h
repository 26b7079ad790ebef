/*
 * router — maps (method, path) to an endpoint (SPEC §5) and applies the checks every endpoint
 * shares before its handler runs: 404 for an unknown path, 405 + Allow for a known path with
 * the wrong method, 401 for admin routes without the admin token (when none is configured: every
 * admin request, or, with --admin-allow-loopback, those of non-loopback clients), 415 for a body
 * that is not application/json.
 *
 * The table lookup (router_match) and the checks (router_admin_ok, router_media_ok,
 * router_token_equal) are pure functions, testable without any handler; router_dispatch ties
 * them together and calls the handler.
 */
#ifndef INVENTORY_ROUTER_H
#define INVENTORY_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "app.h"
#include "metrics.h"
#include "request.h"

/* The endpoints, one per route-table entry. */
enum router_endpoint {
    ROUTER_NONE = 0,
    ROUTER_DASHBOARD,     /* GET  / (the live dashboard, HTML) */
    ROUTER_HEALTHZ,       /* GET  /healthz */
    ROUTER_READYZ,        /* GET  /readyz */
    ROUTER_METRICS,       /* GET  /metrics */
    ROUTER_STOCK_PUT,     /* PUT  /api/v1/skus/{sku} (admin) */
    ROUTER_STOCK_GET,     /* GET  /api/v1/skus/{sku} */
    ROUTER_STOCK_DELETE,  /* DELETE /api/v1/skus/{sku} (admin) */
    ROUTER_STOCK_RESTOCK, /* POST /api/v1/skus/{sku}/restock (admin) */
    ROUTER_ORDER_CREATE,  /* POST /api/v1/orders */
    ROUTER_ORDER_GET,     /* GET  /api/v1/orders/{id} */
    ROUTER_ORDER_CANCEL   /* DELETE /api/v1/orders/{id} (admin) */
};

enum router_outcome {
    ROUTER_FOUND,              /* path and method match: endpoint is set */
    ROUTER_NOT_FOUND,          /* no route has this path: 404 */
    ROUTER_METHOD_NOT_ALLOWED  /* the path is known, the method is not: 405 with allow */
};

struct router_route {
    enum router_outcome outcome;
    enum router_endpoint endpoint; /* ROUTER_NONE unless ROUTER_FOUND */
    bool admin;                    /* the endpoint needs admin authorisation */
    bool writes;                   /* the endpoint changes stock (orders, cancel, PUT, restock,
                                      DELETE): a 503 that cuts it off carries "outcome":"unknown" */
    const char *allow;             /* Allow header of the path, e.g. "GET, HEAD, PUT, DELETE"
                                      (static); NULL when ROUTER_NOT_FOUND */
    const char *param;             /* the {sku}/{id} segment inside path, or NULL */
    size_t param_len;
    enum metrics_route metrics_route; /* the route's label in the request-duration histogram
                                         (METRICS_ROUTE_OTHER when ROUTER_NOT_FOUND) */
};

/* Looks up path (without query string, NUL-terminated) and method in the route table and fills
 * *out. HEAD matches wherever GET does. A {...} pattern segment matches exactly one non-empty
 * path segment (any bytes but '/'); there is no trailing-slash or case folding. out->param
 * points into path. Returns out->outcome. */
enum router_outcome router_match(enum http_method method, const char *path,
                                 struct router_route *out);

/* Compares a[0..alen) with b[0..blen) in time that depends only on max(alen, blen), not on
 * where they differ. True when equal (same length, same bytes). */
bool router_token_equal(const char *a, size_t alen, const char *b, size_t blen);

/* Admin authorisation of req under cfg. With an admin token configured: true only when
 * req->authorization is "Bearer <token>" (scheme case-insensitive, spaces around the token
 * allowed) with exactly that token, compared in constant time; the peer address does not
 * matter (admin_allow_loopback is then ignored). Without a token: false (admin endpoints are
 * closed), unless cfg->admin_allow_loopback and req->peer_loopback. */
bool router_admin_ok(const struct config *cfg, const struct request *req);

/* The 415 rule: true when req has no body (body_len == 0) or its Content-Type is JSON
 * (validate_content_type: application/json, any case, parameters allowed, charset utf-8). */
bool router_media_ok(const struct request *req);

/* The request-duration histogram's route of path (METRICS_ROUTE_OTHER when no route has it). */
enum metrics_route router_metrics_route(const char *path);

/* Handles one request: matches the route (sets req->param/param_len), answers 404/405/401/415
 * itself, otherwise calls the endpoint's handler (handlers.h). On return res->status is set.
 * Every request to an admin endpoint (PUT/DELETE of a SKU, restock, cancel), allowed or not, is
 * written to the log as an "audit" line (info; warn when refused with 401): the action, its
 * SKU or order id, the status and error code, the client, how it was authorised and the
 * presented token's fingerprint (the first 8 hex digits of its SHA-256; never the token). */
void router_dispatch(struct app *app, struct request *req, struct response *res);

/* The handler of endpoint e (handlers.h). */
typedef void (*router_handler_fn)(struct app *, const struct request *, struct response *);
router_handler_fn router_handler(enum router_endpoint e);

/* router_dispatch in two halves, for handlers that finish later (on an event loop):
 * router_begin matches and checks; true when the endpoint's handler is to run (route and
 * *allowed filled, req->param set), false when res already holds the answer (404, 405, 401,
 * 415; audited). router_end, once the handler filled res: a 500 when it set nothing, and the
 * audit line of an admin endpoint. */
bool router_begin(struct app *app, struct request *req, struct response *res,
                  struct router_route *route, bool *allowed);
void router_end(struct app *app, const struct request *req, const struct router_route *route,
                struct response *res, bool allowed);

#endif
