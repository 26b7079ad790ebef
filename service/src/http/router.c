/*
 * router — the route table and the checks shared by every endpoint; see router.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "events.h"
#include "group.h"
#include "handlers.h"
#include "identity.h"
#include "log.h"
#include "queue.h"

#include "queue_pow.h"
#include "router.h"
#include "sha256.h"
#include "validate.h"

/* The route table: one row per endpoint (router.h). Rows of one path keep the order of its
 * Allow header; the first row of each path names its metrics series, and the paths keep the
 * order of the /metrics document. */
static const struct router_row rows[] = {
    {HTTP_GET, "/", 0, .run = dashboard_get},
    {HTTP_GET, "/queue", 0, .run = dashboard_queue_get},
    {HTTP_GET, "/healthz", ROUTER_PROBE, .run = probe_healthz},
    {HTTP_GET, "/readyz", ROUTER_PROBE, .start = probe_readyz_async},
    {HTTP_GET, "/metrics", ROUTER_PROBE, .run = probe_metrics},
    {HTTP_POST, "/api/v1/orders", ROUTER_WRITES, .start = order_create_async},
    {HTTP_GET, "/api/v1/orders/{id}", 0, .start = order_get_async},
    {HTTP_DELETE, "/api/v1/orders/{id}", ROUTER_ADMIN | ROUTER_WRITES, .start = order_cancel_async,
     .audit_action = "order_cancel", .audit_target = "order_id"},
    {HTTP_POST, "/api/v1/orders/{id}/confirm", ROUTER_CONFIRM | ROUTER_WRITES,
     .start = order_confirm_async, .audit_action = "order_confirm", .audit_target = "order_id"},
    {HTTP_POST, "/api/v1/orders/{id}/extend", ROUTER_CONFIRM | ROUTER_WRITES,
     .start = order_extend_async, .audit_action = "order_extend", .audit_target = "order_id"},
    {HTTP_GET, "/api/v1/skus", 0, .start = skulist_get_async},
    {HTTP_GET, "/api/v1/skus/{sku}", 0, .run = status_get_run, .start = status_get_async},
    {HTTP_PUT, "/api/v1/skus/{sku}", ROUTER_ADMIN | ROUTER_WRITES, .start = stock_put_async,
     .audit_action = "sku_put", .audit_target = "sku"},
    {HTTP_DELETE, "/api/v1/skus/{sku}", ROUTER_ADMIN | ROUTER_WRITES, .start = stock_delete_async,
     .audit_action = "sku_delete", .audit_target = "sku"},
    {HTTP_PATCH, "/api/v1/skus/{sku}", ROUTER_ADMIN | ROUTER_WRITES, .start = stock_patch_async,
     .audit_action = "sku_patch", .audit_target = "sku"},
    {HTTP_POST, "/api/v1/skus/{sku}/restock", ROUTER_ADMIN | ROUTER_WRITES,
     .start = stock_restock_async, .audit_action = "sku_restock", .audit_target = "sku"},
    {HTTP_GET, "/api/v1/skus/{sku}/events", 0, .run = events_get_run, .start = events_get_async},
    {HTTP_GET, "/api/v1/skus/{sku}/queue", 0, .run = queue_place_run, .start = queue_place_async},
    {HTTP_POST, "/api/v1/skus/{sku}/queue", ROUTER_WRITES, .start = queue_join_async},
    {HTTP_GET, "/api/v1/skus/{sku}/queue/info", 0, .start = queue_info_async},

    {HTTP_GET, "/api/v1/skus/{sku}/queue/challenge", 0, .start = queue_challenge_get_async},
    {HTTP_GET, "/api/v1/groups/{group}", ROUTER_ADMIN, .start = group_get_async,
     .audit_action = "group_get", .audit_target = "group"},
    {HTTP_PUT, "/api/v1/groups/{group}", ROUTER_ADMIN | ROUTER_WRITES, .start = group_put_async,
     .audit_action = "group_put", .audit_target = "group"},
    {HTTP_DELETE, "/api/v1/groups/{group}", ROUTER_ADMIN | ROUTER_WRITES,
     .start = group_delete_async, .audit_action = "group_delete", .audit_target = "group"},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))
_Static_assert(NROWS < ROUTER_LABEL_OTHER, "a row's index is its metrics label, below OTHER");

const struct router_row *router_rows(size_t *n)
{
    *n = NROWS;
    return rows;
}

static const char *const method_names[] = {[HTTP_GET] = "GET",
                                           [HTTP_POST] = "POST",
                                           [HTTP_PUT] = "PUT",
                                           [HTTP_DELETE] = "DELETE",
                                           [HTTP_PATCH] = "PATCH"};

/* The Allow header of each path, at the index of its first row: its rows' methods in table
 * order, HEAD after GET. Made once (allow_once). */
static char allow_text[NROWS][48];
static pthread_once_t allow_once = PTHREAD_ONCE_INIT;

/* The index of the first row with row i's pattern. */
static size_t first_of_path(size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(rows[j].pattern, rows[i].pattern) == 0)
            return j;
    return i;
}

static void allow_build(void)
{
    for (size_t i = 0; i < NROWS; i++) {
        char *a = allow_text[first_of_path(i)];
        size_t n = strlen(a);
        snprintf(a + n, sizeof(allow_text[0]) - n, "%s%s%s", n ? ", " : "",
                 method_names[rows[i].method], rows[i].method == HTTP_GET ? ", HEAD" : "");
    }
}

const char *router_label(int i)
{
    if (i == ROUTER_LABEL_OTHER)
        return "other";
    if (i < 0 || (size_t)i >= NROWS || first_of_path((size_t)i) != (size_t)i)
        return NULL;
    return rows[i].pattern;
}

/* True when path matches pat; the segment matched by "{...}" goes to *param / *plen. */
static bool match_pattern(const char *pat, const char *path, const char **param, size_t *plen)
{
    while (*pat) {
        if (*pat == '{') {
            const char *seg = path;
            while (*path && *path != '/')
                path++;
            if (path == seg)
                return false;
            *param = seg;
            *plen = (size_t)(path - seg);
            pat = strchr(pat, '}') + 1;
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
    out->label = ROUTER_LABEL_OTHER;
    if (!path)
        return out->outcome;
    if (method == HTTP_HEAD)
        method = HTTP_GET;
    for (size_t i = 0; i < NROWS; i++) {
        const char *param = NULL;
        size_t plen = 0;
        if (!match_pattern(rows[i].pattern, path, &param, &plen))
            continue;
        if (out->outcome == ROUTER_NOT_FOUND) {
            /* The path's first row: its label; the path's other rows follow it. */
            out->outcome = ROUTER_METHOD_NOT_ALLOWED;
            out->label = (int)i;
            out->param = param;
            out->param_len = plen;
        }
        if (rows[i].method == method) {
            out->outcome = ROUTER_FOUND;
            out->row = &rows[i];
            if (param != out->param || plen != out->param_len ||
                strcmp(rows[i].pattern, rows[out->label].pattern) != 0) {
                /* another path's row (patterns that overlap): its own segment and label */
                out->param = param;
                out->param_len = plen;
                out->label = (int)first_of_path(i);
            }
            break;
        }
    }
    if (out->outcome != ROUTER_NOT_FOUND) {
        pthread_once(&allow_once, allow_build);
        out->allow = allow_text[out->label];
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

bool router_admin_ok(const struct config *cfg, const struct request *req)
{
    size_t toklen = strnlen(cfg->admin_token, sizeof(cfg->admin_token));
    /* No token: closed, unless a developer opened them to this machine explicitly. */
    if (toklen == 0)
        return cfg->admin_allow_loopback && req->peer_loopback != 0;

    size_t len = 0;
    const char *h = request_bearer_token(req->authorization, &len);
    if (!h)
        return false;
    return router_token_equal(h, len, cfg->admin_token, toklen);
}

bool router_authorized(const struct app *app, unsigned flags, const struct request *req)
{
    if (!(flags & (ROUTER_ADMIN | ROUTER_CONFIRM)))
        return true;
    if (router_admin_ok(&app->cfg, req))
        return true;
    return (flags & ROUTER_CONFIRM) && identity_is_confirm_token(app->identity, req->authorization);
}

/* True for a row whose requests are authorised and audited (admin or confirm). */
static bool audited(const struct router_row *row)
{
    return (row->flags & (ROUTER_ADMIN | ROUTER_CONFIRM)) != 0;
}

/* Writes the audit line of an admin or confirm request (router.h). */
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
    const char *tok = request_bearer_token(req->authorization, &toklen);
    char fp[9] = "";
    if (tok)
        sha256_hex_prefix(tok, toklen, fp, 8);
    const char *auth = !allowed                           ? "refused"
                       : !router_admin_ok(&app->cfg, req) ? "confirm_token"
                       : app->cfg.admin_token[0]          ? "token"
                                                          : "loopback";
    const char *error = json_string_value(json_object_get(res->body, "error"));
    const struct router_row *row = route->row;
    json_t *o =
        json_pack("{s:s, s:s, s:i, s:s, s:s, s:s?, s:s?}", "action", row->audit_action,
                  row->audit_target, target, "status", res->status, "result", error ? error : "ok",
                  "auth", auth, "token_fingerprint", tok ? fp : NULL, "client", req->client);
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
    case ROUTER_NOT_FOUND: response_error(res, ERROR_NOT_FOUND, NULL); return false;
    case ROUTER_METHOD_NOT_ALLOWED:
        response_error(res, ERROR_METHOD_NOT_ALLOWED, NULL);
        res->allow = route->allow;
        return false;
    case ROUTER_FOUND: break;
    }
    req->param = route->param;
    req->param_len = route->param_len;
    /* the exact read of a public row is an admin's (status.c): judged here, with the rows */
    req->consistent_ok = req->consistent && router_admin_ok(&app->cfg, req);
    *allowed = router_authorized(app, route->row->flags, req);
    if (!*allowed) {
        response_error(res, ERROR_UNAUTHORIZED,
                       route->row->flags & ROUTER_CONFIRM
                           ? "the admin token or the confirm token is required"
                           : "admin authorization required");
    } else if (!router_media_ok(req)) {
        response_error(res, ERROR_UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json");
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
    if (route->outcome == ROUTER_FOUND && audited(route->row))
        audit(app, req, route, res, allowed);
}
