/*
 * GET /api/v1/skus/{sku}: the stock status every product page polls (SPEC §15), answered from
 * this instance's snapshot (statsnap.h) with HTTP caching (strong ETag, If-None-Match → 304,
 * Cache-Control: public, max-age, Age); `?consistent=1` (admin) is the exact read (exact.h).
 *
 * status_get_run answers inside the HTTP callback when the snapshot is fresh: no areq, no
 * Redis, one copy of the snapshot's bytes, which is what keeps a status read near a bare
 * handler's cost. Otherwise status_get_async waits for the snapshot's refresh on the loop.
 */
#include <stdlib.h>
#include <string.h>

#include "areq.h"
#include "exact.h"
#include "handlers.h"
#include "metrics.h"
#include "statsnap.h"
#include "stock.h"
#include "validate.h"

/* 1 when If-None-Match (a list of entity tags, or "*") names etag; weak comparison, as RFC 9110
 * asks of If-None-Match: W/"x" matches "x". */
static int etag_matches(const char *inm, const char *etag)
{
    if (!inm)
        return 0;
    size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return 1;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (strncmp(p, etag, n) == 0 &&
            (p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\t'))
            return 1;
        while (*p && *p != ',')
            p++;
    }
    return 0;
}

/* The answer of snapshot s, age_ms old, to a request with If-None-Match inm: 200 with the
 * snapshot's bytes, 304 when inm names its ETag, 404 for an unknown SKU. 0, -1 out of memory. */
static int snap_answer(struct app *app, const struct snap *s, int64_t age_ms, const char *inm,
                       struct response *res)
{
    res->cache_control = statsnap_cache_control(app->snaps);
    res->has_age = 1;
    res->age_s = (long)(age_ms / 1000);
    int not_modified = s->found && etag_matches(inm, s->etag);
    char *text = malloc(s->len + 1);
    if (!text)
        return -1;
    memcpy(text, s->body, s->len + 1);
    free(res->text);
    res->text = text;
    res->content_type = "application/json";
    if (s->found)
        memcpy(res->etag, s->etag, sizeof(res->etag));
    /* A 304 carries the body too, unsent: libmicrohttpd sends no body with a 304 but gives its
     * Content-Length, which RFC 9110 (8.6) allows only as the 200's length — an empty body would
     * say "Content-Length: 0". */
    res->status = not_modified ? 304 : s->found ? 200 : 404;
    metrics_status_answer(not_modified, age_ms);
    return 0;
}

void status_get_run(struct app *app, const struct request *req, struct response *res)
{
    if (req->consistent || !req->param || !validate_sku(req->param, req->param_len))
        return; /* the exact read, or the 400: status_get_async */
    char sku[VALIDATE_SKU_MAX + 1];
    memcpy(sku, req->param, req->param_len);
    sku[req->param_len] = '\0';
    struct snap *s;
    int64_t age;
    if (!statsnap_fresh(app->snaps, sku, &s, &age))
        return;
    if (snap_answer(app, s, age, req->if_none_match, res) != 0)
        memset(res, 0, sizeof(*res)); /* out of memory here: the slow way may still answer */
    statsnap_unref(s);
}

static void on_exact(void *arg, int rc, json_t *status, const char *why, int out_of_step)
{
    struct areq *ar = arg;
    if (rc < 0)
        exact_read_error(&ar->res, why, out_of_step);
    else if (rc == 0)
        response_error(&ar->res, ERROR_UNKNOWN_SKU, "no such sku");
    else
        response_json(&ar->res, 200, status);
    areq_done(ar);
}

/* The exact read's answer (?consistent=1, or a SKU the snapshot table has no room for). */
static void get_exact(struct areq *ar)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(&ar->req, &ar->res, sku) != 0) {
        areq_done(ar);
        return;
    }
    exact_read_async(ar, sku, NULL, on_exact, ar);
}

static void on_snap(struct areq *ar, int rc, struct snap *s, int64_t age_ms, const char *why,
                    int out_of_step)
{
    if (rc == 0) { /* not cached (the table is full): the exact read */
        get_exact(ar);
        return;
    }
    if (rc < 0)
        exact_read_error(&ar->res, why, out_of_step);
    else if (snap_answer(ar->app, s, age_ms, ar->req.if_none_match, &ar->res) != 0)
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
    statsnap_unref(s);
    areq_done(ar);
}

void status_get_async(struct areq *ar)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(&ar->req, &ar->res, sku) != 0) {
        areq_done(ar);
        return;
    }
    if (ar->req.consistent) {
        if (!ar->req.consistent_ok) {
            response_error(&ar->res, ERROR_UNAUTHORIZED,
                           "?consistent=1 (the exact read) needs admin authorization");
            areq_done(ar);
            return;
        }
        ar->res.cache_control = "no-store";
        exact_read_async(ar, sku, NULL, on_exact, ar);
        return;
    }
    statsnap_wait(ar->app->snaps, ar, sku, on_snap);
}
