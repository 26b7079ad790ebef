/*
 * router — the static route table and the checks shared by every endpoint; see router.h.
 * Patterns are literal paths where '*' stands for one non-empty path segment.
 */
#include <string.h>

#include "handlers.h"
#include "router.h"
#include "validate.h"

#define MAX_METHODS 3

struct route_method {
    enum http_method method;
    enum router_endpoint endpoint;
    bool admin;
};

struct route {
    const char *pattern;
    const char *allow;
    struct route_method methods[MAX_METHODS]; /* unused slots have method HTTP_OTHER */
};

static const struct route routes[] = {
    {"/healthz", "GET, HEAD", {{HTTP_GET, ROUTER_HEALTHZ, false}}},
    {"/readyz", "GET, HEAD", {{HTTP_GET, ROUTER_READYZ, false}}},
    {"/metrics", "GET, HEAD", {{HTTP_GET, ROUTER_METRICS, false}}},
    {"/api/v1/orders", "POST", {{HTTP_POST, ROUTER_ORDER_CREATE, false}}},
    {"/api/v1/orders/*",
     "GET, HEAD, DELETE",
     {{HTTP_GET, ROUTER_ORDER_GET, false}, {HTTP_DELETE, ROUTER_ORDER_CANCEL, true}}},
    {"/api/v1/skus/*",
     "GET, HEAD, PUT, DELETE",
     {{HTTP_GET, ROUTER_STOCK_GET, false},
      {HTTP_PUT, ROUTER_STOCK_PUT, true},
      {HTTP_DELETE, ROUTER_STOCK_DELETE, true}}},
    {"/api/v1/skus/*/restock", "POST", {{HTTP_POST, ROUTER_STOCK_RESTOCK, true}}},
};

typedef void (*handler_fn)(struct app *, const struct request *, struct response *);

static const handler_fn handlers[] = {
    [ROUTER_HEALTHZ] = probe_healthz,       [ROUTER_READYZ] = probe_readyz,
    [ROUTER_METRICS] = probe_metrics,       [ROUTER_STOCK_PUT] = stock_put,
    [ROUTER_STOCK_GET] = stock_get,         [ROUTER_STOCK_DELETE] = stock_delete,
    [ROUTER_STOCK_RESTOCK] = stock_restock, [ROUTER_ORDER_CREATE] = order_create,
    [ROUTER_ORDER_GET] = order_get,         [ROUTER_ORDER_CANCEL] = order_cancel,
};

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
        out->param = param;
        out->param_len = plen;
        out->outcome = ROUTER_METHOD_NOT_ALLOWED;
        for (size_t m = 0; m < MAX_METHODS; m++) {
            if (r->methods[m].method != HTTP_OTHER && r->methods[m].method == method) {
                out->outcome = ROUTER_FOUND;
                out->endpoint = r->methods[m].endpoint;
                out->admin = r->methods[m].admin;
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

bool router_admin_ok(const struct config *cfg, const struct request *req)
{
    size_t toklen = strnlen(cfg->admin_token, sizeof(cfg->admin_token));
    /* No token: closed, unless a developer opened them to this machine explicitly. */
    if (toklen == 0)
        return cfg->admin_allow_loopback && req->peer_loopback != 0;

    const char *h = req->authorization;
    if (!h)
        return false;
    while (is_ows(*h))
        h++;
    static const char scheme[] = "bearer";
    for (size_t i = 0; i < sizeof(scheme) - 1; i++) {
        char c = h[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != scheme[i])
            return false; /* also at the end of h */
    }
    h += sizeof(scheme) - 1;
    if (!is_ows(*h))
        return false;
    while (is_ows(*h))
        h++;
    size_t len = strlen(h);
    while (len > 0 && is_ows(h[len - 1]))
        len--;
    if (len == 0)
        return false;
    return router_token_equal(h, len, cfg->admin_token, toklen);
}

bool router_media_ok(const struct request *req)
{
    return req->body_len == 0 || validate_content_type(req->content_type);
}

void router_dispatch(struct app *app, struct request *req, struct response *res)
{
    struct router_route route;
    switch (router_match(req->method, req->path, &route)) {
    case ROUTER_NOT_FOUND:
        response_error(res, ERROR_NOT_FOUND, NULL);
        return;
    case ROUTER_METHOD_NOT_ALLOWED:
        response_error(res, ERROR_METHOD_NOT_ALLOWED, NULL);
        res->allow = route.allow;
        return;
    case ROUTER_FOUND:
        break;
    }
    req->param = route.param;
    req->param_len = route.param_len;
    if (route.admin && !router_admin_ok(&app->cfg, req)) {
        response_error(res, ERROR_UNAUTHORIZED, "admin authorization required");
        return;
    }
    if (!router_media_ok(req)) {
        response_error(res, ERROR_UNSUPPORTED_MEDIA_TYPE,
                       "Content-Type must be application/json");
        return;
    }
    handlers[route.endpoint](app, req, res);
    if (res->status == 0)
        response_error(res, ERROR_INTERNAL, NULL);
}
