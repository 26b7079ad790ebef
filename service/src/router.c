/*
 * router — the static route table and the checks shared by every endpoint; see router.h.
 * Patterns are literal paths where '*' stands for one non-empty path segment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "handlers.h"
#include "log.h"
#include "router.h"
#include "sha256.h"
#include "validate.h"

#define MAX_METHODS 3

struct route_method {
    enum http_method method;
    enum router_endpoint endpoint;
    bool admin;
    bool writes; /* changes stock: a 503 cut off mid-way may follow a change (outcome unknown) */
};

struct route {
    const char *pattern;
    const char *allow;
    enum metrics_route metrics_route;
    struct route_method methods[MAX_METHODS]; /* unused slots have method HTTP_OTHER */
};

static const struct route routes[] = {
    {"/", "GET, HEAD", METRICS_ROUTE_DASHBOARD, {{HTTP_GET, ROUTER_DASHBOARD, false, false}}},
    {"/healthz", "GET, HEAD", METRICS_ROUTE_HEALTHZ, {{HTTP_GET, ROUTER_HEALTHZ, false, false}}},
    {"/readyz", "GET, HEAD", METRICS_ROUTE_READYZ, {{HTTP_GET, ROUTER_READYZ, false, false}}},
    {"/metrics", "GET, HEAD", METRICS_ROUTE_METRICS, {{HTTP_GET, ROUTER_METRICS, false, false}}},
    {"/api/v1/orders", "POST", METRICS_ROUTE_ORDERS, {{HTTP_POST, ROUTER_ORDER_CREATE, false, true}}},
    {"/api/v1/orders/*",
     "GET, HEAD, DELETE",
     METRICS_ROUTE_ORDER,
     {{HTTP_GET, ROUTER_ORDER_GET, false, false}, {HTTP_DELETE, ROUTER_ORDER_CANCEL, true, true}}},
    {"/api/v1/skus/*",
     "GET, HEAD, PUT, DELETE",
     METRICS_ROUTE_SKU,
     {{HTTP_GET, ROUTER_STOCK_GET, false, false},
      {HTTP_PUT, ROUTER_STOCK_PUT, true, true},
      {HTTP_DELETE, ROUTER_STOCK_DELETE, true, true}}},
    {"/api/v1/skus/*/restock",
     "POST",
     METRICS_ROUTE_RESTOCK,
     {{HTTP_POST, ROUTER_STOCK_RESTOCK, true, true}}},
};

typedef void (*handler_fn)(struct app *, const struct request *, struct response *);

static const handler_fn handlers[] = {
    [ROUTER_DASHBOARD] = dashboard_get,
    [ROUTER_HEALTHZ] = probe_healthz,       [ROUTER_READYZ] = probe_readyz,
    [ROUTER_METRICS] = probe_metrics,       [ROUTER_STOCK_PUT] = stock_put,
    [ROUTER_STOCK_GET] = stock_get,         [ROUTER_STOCK_DELETE] = stock_delete,
    [ROUTER_STOCK_RESTOCK] = stock_restock, [ROUTER_ORDER_CREATE] = order_create,
    [ROUTER_ORDER_GET] = order_get,         [ROUTER_ORDER_CANCEL] = order_cancel,
};

router_handler_fn router_handler(enum router_endpoint e)
{
    return e > ROUTER_NONE && e <= ROUTER_ORDER_CANCEL ? handlers[e] : NULL;
}

/* True when path matches pat; the segment matched by '*' goes to *param / *plen. */
static bool match_pattern(const char *pat, const char *path, const char **param, size_t *plen)
{
    while (*pat) {
        if (*pat == '*') {
            const char *seg = path;
            while (*path && *path != '/')
                path++;
            if (path == seg)
                return false;
            *param = seg;
            *plen = (size_t)(path - seg);
            pat++;
        } else if (*pat++ != *path++) {
            return false; /* also stops at the end of path: '\0' never equals a pattern byte */
        }
    }
    return *path == '\0';
}

enum router_outcome router_match(enum http_method method, const char *path,
                                 struct router_route *out)
{
    memset(out, 0, sizeof(*out));
    out->outcome = ROUTER_NOT_FOUND;
    out->metrics_route = METRICS_ROUTE_OTHER;
    if (!path)
        return out->outcome;
    if (method == HTTP_HEAD)
        method = HTTP_GET;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *r = &routes[i];
        const char *param = NULL;
        size_t plen = 0;
        if (!match_pattern(r->pattern, path, &param, &plen))
            continue;
        out->allow = r->allow;
        out->metrics_route = r->metrics_route;
        out->param = param;
        out->param_len = plen;
        out->outcome = ROUTER_METHOD_NOT_ALLOWED;
        for (size_t m = 0; m < MAX_METHODS; m++) {
            if (r->methods[m].method != HTTP_OTHER && r->methods[m].method == method) {
                out->outcome = ROUTER_FOUND;
                out->endpoint = r->methods[m].endpoint;
                out->admin = r->methods[m].admin;
                out->writes = r->methods[m].writes;
                break;
            }
        }
        return out->outcome;
    }
    return out->outcome;
}

bool router_token_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    const unsigned char *ua = (const unsigned char *)a;
    const unsigned char *ub = (const unsigned char *)b;
    size_t n = alen > blen ? alen : blen;
    /* volatile keeps the compiler from turning the loop into an early-exit comparison. */
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < alen ? ua[i] : 0;
        unsigned char cb = i < blen ? ub[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The token after "Bearer " in an Authorization header (*len bytes), or NULL. */
static const char *bearer_token(const char *h, size_t *len)
{
    if (!h)
        return NULL;
    while (is_ows(*h))
        h++;
    static const char scheme[] = "bearer";
    for (size_t i = 0; i < sizeof(scheme) - 1; i++) {
        char c = h[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != scheme[i])
            return NULL; /* also at the end of h */
    }
    h += sizeof(scheme) - 1;
    if (!is_ows(*h))
        return NULL;
    while (is_ows(*h))
        h++;
    size_t n = strlen(h);
    while (n > 0 && is_ows(h[n - 1]))
        n--;
    *len = n;
    return n > 0 ? h : NULL;
}

bool router_admin_ok(const struct config *cfg, const struct request *req)
{
    size_t toklen = strnlen(cfg->admin_token, sizeof(cfg->admin_token));
    /* No token: closed, unless a developer opened them to this machine explicitly. */
    if (toklen == 0)
        return cfg->admin_allow_loopback && req->peer_loopback != 0;

    size_t len = 0;
    const char *h = bearer_token(req->authorization, &len);
    if (!h)
        return false;
    return router_token_equal(h, len, cfg->admin_token, toklen);
}

enum metrics_route router_metrics_route(const char *path)
{
    struct router_route route;
    router_match(HTTP_GET, path, &route);
    return route.metrics_route;
}

static const char *audit_action(enum router_endpoint e)
{
    switch (e) {
    case ROUTER_STOCK_PUT:
        return "sku_put";
    case ROUTER_STOCK_DELETE:
        return "sku_delete";
    case ROUTER_STOCK_RESTOCK:
        return "sku_restock";
    case ROUTER_ORDER_CANCEL:
        return "order_cancel";
    default:
        return "admin";
    }
}

/* Writes the audit line of an admin request (router.h). */
static void audit(const struct app *app, const struct request *req,
                  const struct router_route *route, const struct response *res, bool allowed)
{
    enum config_log_level level = res->status == 401 ? CONFIG_LOG_WARN : CONFIG_LOG_INFO;
    if (!log_enabled(level))
        return;
    char target[129];
    size_t n = req->param_len < sizeof(target) - 1 ? req->param_len : sizeof(target) - 1;
    for (size_t i = 0; i < n; i++) {
        char c = req->param[i];
        target[i] = c >= 0x21 && c < 0x7f ? c : '?';
    }
    target[n] = '\0';
    size_t toklen = 0;
    const char *tok = bearer_token(req->authorization, &toklen);
    char fp[9] = "";
    if (tok)
        sha256_hex_prefix(tok, toklen, fp, 8);
    const char *auth = !allowed ? "refused" : app->cfg.admin_token[0] ? "token" : "loopback";
    const char *error = json_string_value(json_object_get(res->body, "error"));
    bool order = route->endpoint == ROUTER_ORDER_CANCEL;
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s?, s:s?}", "action",
                          audit_action(route->endpoint), order ? "order_id" : "sku", target,
                          "status", res->status, "result", error ? error : "ok", "auth", auth,
                          "token_fingerprint", tok ? fp : NULL, "client", req->client);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (text)
        log_json(level, "audit", "audit", text);
    free(text);
    json_decref(o);
}

bool router_media_ok(const struct request *req)
{
    return req->body_len == 0 || validate_content_type(req->content_type);
}

bool router_begin(struct app *app, struct request *req, struct response *res,
                  struct router_route *route, bool *allowed)
{
    *allowed = true;
    switch (router_match(req->method, req->path, route)) {
    case ROUTER_NOT_FOUND:
        response_error(res, ERROR_NOT_FOUND, NULL);
        return false;
    case ROUTER_METHOD_NOT_ALLOWED:
        response_error(res, ERROR_METHOD_NOT_ALLOWED, NULL);
        res->allow = route->allow;
        return false;
    case ROUTER_FOUND:
        break;
    }
    req->param = route->param;
    req->param_len = route->param_len;
    *allowed = !route->admin || router_admin_ok(&app->cfg, req);
    if (!*allowed) {
        response_error(res, ERROR_UNAUTHORIZED, "admin authorization required");
    } else if (!router_media_ok(req)) {
        response_error(res, ERROR_UNSUPPORTED_MEDIA_TYPE,
                       "Content-Type must be application/json");
    } else {
        return true;
    }
    router_end(app, req, route, res, *allowed);
    return false;
}

void router_end(struct app *app, const struct request *req, const struct router_route *route,
                struct response *res, bool allowed)
{
    if (res->status == 0)
        response_error(res, ERROR_INTERNAL, NULL);
    if (route->outcome == ROUTER_FOUND && route->admin)
        audit(app, req, route, res, allowed);
}

void router_dispatch(struct app *app, struct request *req, struct response *res)
{
    struct router_route route;
    bool allowed;
    if (!router_begin(app, req, res, &route, &allowed))
        return;
    handlers[route.endpoint](app, req, res);
    router_end(app, req, &route, res, allowed);
}
