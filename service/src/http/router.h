/*
 * router — the route table (SPEC §5), one row per endpoint, and the checks every endpoint
 * shares before its handler runs: 404 for an unknown path, 405 + Allow for a known path with
 * the wrong method, 401 for admin routes without the admin token (when none is configured: every
 * admin request, or, with --admin-allow-loopback, those of non-loopback clients) and for confirm
 * routes without the admin or the confirm token, 415 for a body that is not application/json.
 *
 * A row (struct router_row, in router.c's table) holds everything the service knows of an
 * endpoint: method, path pattern (also the route="..." label of the request-duration histogram
 * and the access log), flags (admin, writes, probe), its handler and, for admin rows, the
 * audit line's action. Dispatch, the Allow header, the admin check, "outcome unknown" on a
 * deadline, the rate-limit exemption, the metrics label and the audit line all read the row;
 * nothing else names an endpoint. Adding an endpoint is one row plus its handler.
 *
 * The lookup (router_match) and the checks (router_admin_ok, router_authorized, router_media_ok,
 * router_token_equal) are pure functions, testable without any handler; router_begin and
 * router_end bracket the handler (http.c calls them on its worker loop).
 */
#ifndef INVENTORY_ROUTER_H
#define INVENTORY_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "app.h"
#include "metrics.h"
#include "request.h"

struct areq;

/* Row flags (struct router_row.flags). */
enum router_flag {
    ROUTER_ADMIN = 0x1,  /* needs admin authorisation (401 without it); every request audited */
    ROUTER_WRITES = 0x2, /* changes stock: a 503 that cuts it off (deadline, shutdown) carries
                            "outcome":"unknown" */
    ROUTER_PROBE = 0x4,  /* a load balancer's probe: never rate-limited */
    ROUTER_CONFIRM = 0x8 /* authorised as ROUTER_ADMIN, or by the confirm token
                            (--confirm-token-file, identity.h): the payment service's
                            least-privilege token, which ROUTER_ADMIN rows refuse; every request
                            audited */
};

/* A handler that answers at once, on the loop, without waiting on anything (fills res). */
typedef void (*router_run_fn)(struct app *app, const struct request *req, struct response *res);
/* A handler that answers later: it gets an areq and ends with areq_done (areq.h). */
typedef void (*router_start_fn)(struct areq *ar);

/* One endpoint: run, start, or both (run answers from memory when it can: when it leaves
 * res->status 0, start takes the request). */
struct router_row {
    enum http_method method; /* GET rows also answer HEAD */
    const char *pattern;     /* literal path bytes; "{name}" matches one non-empty segment (any
                                bytes but '/'); no trailing-slash or case folding. Also the
                                route's metrics label, e.g. "/api/v1/skus/{sku}" */
    unsigned flags;          /* ROUTER_ADMIN | ROUTER_WRITES | ROUTER_PROBE | ROUTER_CONFIRM */
    router_run_fn run;
    router_start_fn start;
    const char *audit_action; /* admin and confirm rows: the audit line's "action", e.g.
                                 "sku_put" */
    const char *audit_target; /* admin and confirm rows: the audit line's key for the {..}
                                 segment */
};

/* The table: *n rows (static). */
const struct router_row *router_rows(size_t *n);

enum router_outcome {
    ROUTER_FOUND,             /* path and method match: row is set */
    ROUTER_NOT_FOUND,         /* no row has this path: 404 */
    ROUTER_METHOD_NOT_ALLOWED /* the path is known, the method is not: 405 with allow */
};

/* The metrics label index of a request no row's pattern matched ("other"). Labels are
 * 0..ROUTER_LABEL_OTHER; router_label names them. */
#define ROUTER_LABEL_OTHER (METRICS_ROUTES_MAX - 1)

struct router_route {
    enum router_outcome outcome;
    const struct router_row *row; /* NULL unless ROUTER_FOUND */
    const char *allow;            /* Allow header of the path, e.g. "GET, HEAD, PUT, DELETE"
                                     (static); NULL when ROUTER_NOT_FOUND */
    const char *param;            /* the {..} segment inside path, or NULL */
    size_t param_len;
    int label; /* the path's metrics label (router_label); ROUTER_LABEL_OTHER
                  when ROUTER_NOT_FOUND */
};

/* Looks up path (without query string, NUL-terminated) and method in the route table and fills
 * *out. HEAD matches wherever GET does. out->param points into path. Returns out->outcome. */
enum router_outcome router_match(enum http_method method, const char *path,
                                 struct router_route *out);

/* The route label of index i (static): the pattern of the first row of each path, "other" for
 * ROUTER_LABEL_OTHER, NULL for every other index (a later row of a path already named, or no
 * row). The request-duration histogram has one series per non-NULL label, in index order. */
const char *router_label(int i);

/* Compares a[0..alen) with b[0..blen) in time that depends only on max(alen, blen), not on
 * where they differ. True when equal (same length, same bytes). */
bool router_token_equal(const char *a, size_t alen, const char *b, size_t blen);

/* Admin authorisation of req under cfg. With an admin token configured: true only when
 * req->authorization is "Bearer <token>" (scheme case-insensitive, spaces around the token
 * allowed) with exactly that token, compared in constant time; the peer address does not
 * matter (admin_allow_loopback is then ignored). Without a token: false (admin endpoints are
 * closed), unless cfg->admin_allow_loopback and req->peer_loopback. */
bool router_admin_ok(const struct config *cfg, const struct request *req);

/* The authorisation a row with flags asks of req: true for a row with neither ROUTER_ADMIN nor
 * ROUTER_CONFIRM; otherwise when router_admin_ok, or, for a ROUTER_CONFIRM row only, when
 * req->authorization is "Bearer <the confirm token>" (identity_is_confirm_token; never when
 * app->identity is NULL or has no confirm token). */
bool router_authorized(const struct app *app, unsigned flags, const struct request *req);

/* The 415 rule: true when req has no body (body_len == 0) or its Content-Type is JSON
 * (validate_content_type: application/json, any case, parameters allowed, charset utf-8). */
bool router_media_ok(const struct request *req);

/* The two halves around a handler. router_begin matches req and checks it; true when the row's
 * handler is to run (route and *allowed filled, req->param set), false when res already holds
 * the answer (404, 405 + Allow, 401, 415; audited). router_end, once the handler filled res: a
 * 500 when it set nothing, and for an admin or confirm row the "audit" log line (info; warn when
 * refused with 401): the action, its {..} segment, the status and error code, the client, how it
 * was authorised ("token", "loopback", "confirm_token" or "refused") and the presented token's
 * fingerprint (the first 8 hex digits of its SHA-256;
 * never the token). */
bool router_begin(struct app *app, struct request *req, struct response *res,
                  struct router_route *route, bool *allowed);
void router_end(struct app *app, const struct request *req, const struct router_route *route,
                struct response *res, bool allowed);

#endif
