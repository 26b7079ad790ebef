/*
 * Unit tests of service/src/http/router.c and the probes of service/src/http/probe.c: the route
 * table itself (every row reachable by its method and path, HEAD as GET, one handler per row, admin
 * rows audited, each path's Allow header and metrics label), 404 and 405 + Allow, the
 * constant-time token compare, admin authorisation (token, loopback rule, 401 +
 * WWW-Authenticate on every admin row), ROUTER_CONFIRM (the admin or the confirm token; admin
 * rows refuse the confirm token), the 415 rule, the order of the checks in router_begin,
 * router_end's 500, and the probes that answer at once.
 *
 * The table is read through router_rows, so a row added later is tested by the table-driven
 * tests without a line here; test_rows_are_the_api restates SPEC §5 so that a row changed or
 * dropped by mistake fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "app.h"
#include "events.h"
#include "group.h"
#include "handlers.h"
#include "identity.h"
#include "metrics.h"
#include "queue.h"

#include "queue_pow.h"
#include "router.h"

static struct app app;

static int setup(void **state)
{
    (void)state;
    memset(&app, 0, sizeof(app));
    config_defaults(&app.cfg);
    return 0;
}

static struct request make_req(enum http_method m, const char *path)
{
    struct request r = {.method = m, .path = path};
    return r;
}

static const char *error_of(const struct response *res)
{
    return json_string_value(json_object_get(res->body, "error"));
}

static const char *const method_names[] = {
    [HTTP_OTHER] = "OTHER", [HTTP_GET] = "GET",       [HTTP_HEAD] = "HEAD",  [HTTP_POST] = "POST",
    [HTTP_PUT] = "PUT",     [HTTP_DELETE] = "DELETE", [HTTP_PATCH] = "PATCH"};

/* A path that row's pattern matches: each "{..}" replaced by param. */
static void sample_path(const struct router_row *row, const char *param, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = row->pattern; *p && n + 1 < len; p++) {
        if (*p == '{') {
            n += (size_t)snprintf(out + n, len - n, "%s", param);
            p = strchr(p, '}');
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

/* True when s, a ", "-separated list, holds word. */
static bool list_has(const char *s, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = s; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 2 : NULL)
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/* ---- the table ------------------------------------------------------------------------- */

/* Every row is reached by its own method and a path of its pattern (a row shadowed by an
 * earlier one, or never looked at, fails here), GET rows by HEAD too; the {..} segment is the
 * request's param; every other method on the path is 405 with an Allow that lists exactly the
 * methods that have a row there. */
static void test_every_row_reachable(void **state)
{
    (void)state;
    size_t n;
    const struct router_row *rows = router_rows(&n);
    assert_true(n > 0 && n < ROUTER_LABEL_OTHER);
    for (size_t i = 0; i < n; i++) {
        char path[256];
        sample_path(&rows[i], "p-1.x", path, sizeof(path));
        struct router_route r;
        if (router_match(rows[i].method, path, &r) != ROUTER_FOUND || r.row != &rows[i])
            fail_msg("row %zu (%s %s) is not reached by %s", i, method_names[rows[i].method],
                     rows[i].pattern, path);
        if (strchr(rows[i].pattern, '{')) {
            assert_non_null(r.param);
            assert_int_equal(r.param_len, strlen("p-1.x"));
            assert_memory_equal(r.param, "p-1.x", r.param_len);
            assert_true(r.param > path && r.param < path + strlen(path));
        } else {
            assert_null(r.param);
        }
        assert_non_null(r.allow);
        assert_true(list_has(r.allow, method_names[rows[i].method]));
        if (rows[i].method == HTTP_GET) {
            assert_int_equal(router_match(HTTP_HEAD, path, &r), ROUTER_FOUND);
            assert_ptr_equal(r.row, &rows[i]);
            assert_true(list_has(r.allow, "HEAD"));
        }
        for (enum http_method m = HTTP_OTHER; m <= HTTP_METHOD_LAST; m++) {
            enum router_outcome o = router_match(m, path, &r);
            bool listed = list_has(r.allow, method_names[m]);
            if (o == ROUTER_FOUND) {
                assert_true(listed);
                assert_string_equal(r.row->pattern, rows[i].pattern);
            } else if (o != ROUTER_METHOD_NOT_ALLOWED || listed || r.row) {
                fail_msg("%s %s: outcome %d, Allow \"%s\"", method_names[m], path, (int)o,
                         r.allow ? r.allow : "(null)");
            }
        }
    }
}

/* Each row has a handler (run, start, or both: run answers from memory when it can, start
 * otherwise — never a run-only row that may leave the answer to nobody); admin rows say what their
 * audit line calls them; no two rows share a method and a pattern. */
static void test_rows_well_formed(void **state)
{
    (void)state;
    size_t n;
    const struct router_row *rows = router_rows(&n);
    for (size_t i = 0; i < n; i++) {
        const struct router_row *row = &rows[i];
        if (!row->run && !row->start)
            fail_msg("row %s %s: needs a handler (run or start)", method_names[row->method],
                     row->pattern);
        assert_true(row->method == HTTP_GET || row->method == HTTP_POST ||
                    row->method == HTTP_PUT || row->method == HTTP_DELETE ||
                    row->method == HTTP_PATCH);
        assert_int_equal(row->pattern[0], '/');
        if (row->flags & (ROUTER_ADMIN | ROUTER_CONFIRM)) {
            assert_non_null(row->audit_action);
            assert_non_null(row->audit_target);
            assert_non_null(strchr(row->pattern, '{')); /* the audit line names its target */
        }
        if (row->flags & ROUTER_PROBE)
            assert_false(row->flags & (ROUTER_ADMIN | ROUTER_WRITES | ROUTER_CONFIRM));
        /* a row is admin-only or admin-or-confirm, not both */
        assert_false((row->flags & ROUTER_ADMIN) && (row->flags & ROUTER_CONFIRM));
        for (size_t j = 0; j < i; j++)
            assert_false(rows[j].method == row->method &&
                         strcmp(rows[j].pattern, row->pattern) == 0);
    }
}

/* SPEC §5, restated: which rows there are, their handlers and flags. */
static void test_rows_are_the_api(void **state)
{
    (void)state;
    static const struct {
        enum http_method m;
        const char *path;
        router_run_fn run;
        router_start_fn start;
        unsigned flags;
        const char *audit;
    } api[] = {
        {HTTP_GET, "/", dashboard_get, NULL, 0, NULL},
        {HTTP_GET, "/queue", dashboard_queue_get, NULL, 0, NULL},
        {HTTP_GET, "/healthz", probe_healthz, NULL, ROUTER_PROBE, NULL},
        {HTTP_GET, "/readyz", NULL, probe_readyz_async, ROUTER_PROBE, NULL},
        {HTTP_GET, "/metrics", probe_metrics, NULL, ROUTER_PROBE, NULL},
        {HTTP_POST, "/api/v1/orders", NULL, order_create_async, ROUTER_WRITES, NULL},
        {HTTP_GET, "/api/v1/orders/o-123", NULL, order_get_async, 0, NULL},
        {HTTP_DELETE, "/api/v1/orders/o-123", NULL, order_cancel_async,
         ROUTER_ADMIN | ROUTER_WRITES, "order_cancel"},
        {HTTP_POST, "/api/v1/orders/o-123/confirm", NULL, order_confirm_async,
         ROUTER_CONFIRM | ROUTER_WRITES, "order_confirm"},
        {HTTP_POST, "/api/v1/orders/o-123/extend", NULL, order_extend_async,
         ROUTER_CONFIRM | ROUTER_WRITES, "order_extend"},
        {HTTP_GET, "/api/v1/skus", NULL, skulist_get_async, 0, NULL},
        {HTTP_GET, "/api/v1/skus/iphone-15", status_get_run, status_get_async, 0, NULL},
        {HTTP_PUT, "/api/v1/skus/A.b:c_d", NULL, stock_put_async, ROUTER_ADMIN | ROUTER_WRITES,
         "sku_put"},
        {HTTP_DELETE, "/api/v1/skus/x", NULL, stock_delete_async, ROUTER_ADMIN | ROUTER_WRITES,
         "sku_delete"},
        {HTTP_PATCH, "/api/v1/skus/x", NULL, stock_patch_async, ROUTER_ADMIN | ROUTER_WRITES,
         "sku_patch"},
        {HTTP_POST, "/api/v1/skus/x1/restock", NULL, stock_restock_async,
         ROUTER_ADMIN | ROUTER_WRITES, "sku_restock"},
        {HTTP_GET, "/api/v1/skus/x1/events", events_get_run, events_get_async, 0, NULL},
        {HTTP_GET, "/api/v1/skus/x1/queue", queue_place_run, queue_place_async, 0, NULL},
        {HTTP_POST, "/api/v1/skus/x1/queue", NULL, queue_join_async, ROUTER_WRITES, NULL},
        {HTTP_GET, "/api/v1/skus/x1/queue/info", NULL, queue_info_async, 0, NULL},

        {HTTP_GET, "/api/v1/skus/x1/queue/challenge", NULL, queue_challenge_get_async, 0, NULL},
        {HTTP_GET, "/api/v1/groups/style-123", NULL, group_get_async, ROUTER_ADMIN, "group_get"},
        {HTTP_PUT, "/api/v1/groups/style-123", NULL, group_put_async, ROUTER_ADMIN | ROUTER_WRITES,
         "group_put"},
        {HTTP_DELETE, "/api/v1/groups/g", NULL, group_delete_async, ROUTER_ADMIN | ROUTER_WRITES,
         "group_delete"},
        /* the param is not validated here: any bytes but '/' */
        {HTTP_GET, "/api/v1/skus/bad sku!%", status_get_run, status_get_async, 0, NULL},
        {HTTP_GET, "/api/v1/skus/restock", status_get_run, status_get_async, 0, NULL},
    };
    size_t n;
    router_rows(&n);
    assert_int_equal(n, 24); /* the api[] rows but the last two */
    for (size_t i = 0; i < sizeof(api) / sizeof(api[0]); i++) {
        struct router_route r;
        if (router_match(api[i].m, api[i].path, &r) != ROUTER_FOUND)
            fail_msg("%s %s: not found", method_names[api[i].m], api[i].path);
        assert_ptr_equal(r.row->run, api[i].run);
        assert_ptr_equal(r.row->start, api[i].start);
        assert_int_equal(r.row->flags, api[i].flags);
        if (api[i].audit)
            assert_string_equal(r.row->audit_action, api[i].audit);
    }
}

/* Each path's first row names its metrics series (its pattern), in table order, then "other";
 * a request's label is its path's, whatever its method. */
static void test_labels(void **state)
{
    (void)state;
    static const char *const want[] = {
        "/",
        "/queue",
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/orders",
        "/api/v1/orders/{id}",
        "/api/v1/orders/{id}/confirm",
        "/api/v1/orders/{id}/extend",
        "/api/v1/skus",
        "/api/v1/skus/{sku}",
        "/api/v1/skus/{sku}/restock",
        "/api/v1/skus/{sku}/events",
        "/api/v1/skus/{sku}/queue",
        "/api/v1/skus/{sku}/queue/info",

        "/api/v1/skus/{sku}/queue/challenge",
        "/api/v1/groups/{group}",
        "other",
    };
    size_t k = 0;
    for (int i = 0; i < METRICS_ROUTES_MAX; i++) {
        const char *l = router_label(i);
        if (!l)
            continue;
        if (k >= sizeof(want) / sizeof(want[0]))
            fail_msg("label %d \"%s\" is one too many", i, l);
        assert_string_equal(l, want[k]);
        k++;
    }
    assert_int_equal(k, sizeof(want) / sizeof(want[0]));
    assert_null(router_label(-1));
    assert_null(router_label(METRICS_ROUTES_MAX));
    assert_string_equal(router_label(ROUTER_LABEL_OTHER), "other");

    struct router_route r;
    router_match(HTTP_PUT, "/api/v1/orders/o1", &r); /* 405: still the path's label */
    assert_string_equal(router_label(r.label), "/api/v1/orders/{id}");
    router_match(HTTP_DELETE, "/api/v1/skus/a", &r);
    assert_string_equal(router_label(r.label), "/api/v1/skus/{sku}");
    router_match(HTTP_GET, "/nope", &r);
    assert_string_equal(router_label(r.label), "other");
}

/* ---- router_match: 404 and 405 ------------------------------------------------------- */

static void test_match_not_found(void **state)
{
    (void)state;
    static const char *const paths[] = {
        "",
        "//",
        "/index.html",
        "/healthz/",
        "/healthzz",
        "/Healthz",
        "//healthz",
        "/api",
        "/api/v1",
        "/api/v1/skus/",
        "/api/v1/skus//restock",
        "/api/v1/skus/a/",
        "/api/v1/skus/a/b",
        "/api/v1/skus/a/restock/",
        "/api/v1/skus/a/restock/x",
        "/api/v1/orders/",
        "/api/v1/orders/a/b",
        "/api/v2/orders",
        "/API/v1/orders",
        "healthz",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        struct router_route r;
        if (router_match(HTTP_GET, paths[i], &r) != ROUTER_NOT_FOUND)
            fail_msg("\"%s\" should be 404", paths[i]);
        assert_null(r.row);
        assert_int_equal(r.label, ROUTER_LABEL_OTHER);
        assert_null(r.allow);
        if (router_match(HTTP_POST, paths[i], &r) != ROUTER_NOT_FOUND)
            fail_msg("POST \"%s\" should be 404", paths[i]);
    }
    struct router_route r;
    assert_int_equal(router_match(HTTP_GET, NULL, &r), ROUTER_NOT_FOUND);
}

static void test_match_method_not_allowed(void **state)
{
    (void)state;
    static const struct {
        enum http_method m;
        const char *path;
        const char *allow;
    } cases[] = {
        {HTTP_POST, "/healthz", "GET, HEAD"},
        {HTTP_DELETE, "/readyz", "GET, HEAD"},
        {HTTP_PUT, "/metrics", "GET, HEAD"},
        {HTTP_OTHER, "/metrics", "GET, HEAD"},
        {HTTP_POST, "/api/v1/skus/a", "GET, HEAD, PUT, DELETE, PATCH"},
        {HTTP_OTHER, "/api/v1/skus/a", "GET, HEAD, PUT, DELETE, PATCH"},
        {HTTP_PATCH, "/api/v1/skus/a/restock", "POST"},
        {HTTP_PATCH, "/api/v1/orders/o1", "GET, HEAD, DELETE"},
        {HTTP_GET, "/api/v1/skus/a/restock", "POST"},
        {HTTP_PUT, "/api/v1/skus/a/restock", "POST"},
        {HTTP_GET, "/api/v1/orders", "POST"},
        {HTTP_HEAD, "/api/v1/orders", "POST"},
        {HTTP_DELETE, "/api/v1/orders", "POST"},
        {HTTP_POST, "/api/v1/orders/o1", "GET, HEAD, DELETE"},
        {HTTP_PUT, "/api/v1/orders/o1", "GET, HEAD, DELETE"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct router_route r;
        if (router_match(cases[i].m, cases[i].path, &r) != ROUTER_METHOD_NOT_ALLOWED)
            fail_msg("case %zu %s should be 405", i, cases[i].path);
        assert_null(r.row);
        assert_non_null(r.allow);
        assert_string_equal(r.allow, cases[i].allow);
    }
}

/* ---- router_token_equal / router_admin_ok / router_media_ok ------------------------------ */

static void test_token_equal(void **state)
{
    (void)state;
    assert_true(router_token_equal("secret", 6, "secret", 6));
    assert_true(router_token_equal("", 0, "", 0));
    assert_true(router_token_equal(NULL, 0, NULL, 0));
    assert_false(router_token_equal("secret", 6, "secreT", 6));
    assert_false(router_token_equal("secret", 6, "Secret", 6));
    assert_false(router_token_equal("secret", 6, "secre", 5)); /* prefix */
    assert_false(router_token_equal("secre", 5, "secret", 6));
    assert_false(router_token_equal("secret", 6, "secretX", 7)); /* extension */
    assert_false(router_token_equal("", 0, "x", 1));
    assert_false(router_token_equal("x", 1, "", 0));
    /* A trailing NUL is not the end of a length-delimited token. */
    assert_false(router_token_equal("ab\0", 3, "ab", 2));
    assert_true(router_token_equal("a\0b", 3, "a\0b", 3));
    assert_false(router_token_equal("a\0b", 3, "a\0c", 3));
    /* Every byte value, every position. */
    char a[64], b[64];
    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = b[i] = (char)(i * 7 + 1);
    assert_true(router_token_equal(a, sizeof(a), b, sizeof(b)));
    for (size_t i = 0; i < sizeof(a); i++) {
        for (int bit = 0; bit < 8; bit++) {
            b[i] = (char)(a[i] ^ (1 << bit));
            assert_false(router_token_equal(a, sizeof(a), b, sizeof(b)));
            b[i] = a[i];
        }
    }
}

static void test_admin_with_token(void **state)
{
    (void)state;
    snprintf(app.cfg.admin_token, sizeof(app.cfg.admin_token), "%s", "s3cret-T0ken");
    struct request r = make_req(HTTP_PUT, "/api/v1/skus/a");
    static const struct {
        const char *auth;
        bool ok;
    } cases[] = {
        {"Bearer s3cret-T0ken", true},
        {"bearer s3cret-T0ken", true},
        {"BEARER s3cret-T0ken", true},
        {"  Bearer   s3cret-T0ken  ", true},
        {"Bearer\ts3cret-T0ken", true},
        {NULL, false},
        {"", false},
        {"Bearer", false},
        {"Bearer ", false},
        {"Bearers3cret-T0ken", false},
        {"Basic s3cret-T0ken", false},
        {"s3cret-T0ken", false},
        {"Bearer s3cret-T0ke", false},
        {"Bearer s3cret-T0kenn", false},
        {"Bearer S3CRET-T0KEN", false},
        {"Bearer s3cret-T0ken extra", false},
        {"Bear s3cret-T0ken", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r.authorization = cases[i].auth;
        for (int lb = 0; lb <= 1; lb++) { /* with a token the peer does not matter */
            r.peer_loopback = lb;
            if (router_admin_ok(&app.cfg, &r) != cases[i].ok)
                fail_msg("case %zu \"%s\" loopback=%d: expected %d", i,
                         cases[i].auth ? cases[i].auth : "(null)", lb, cases[i].ok);
        }
    }
}

/* Issue #10: behind a proxy on the same host every client is a loopback peer, so "no token:
 * loopback may" opened the admin API to the world. No token now means closed. */
static void test_admin_closed_without_token(void **state)
{
    (void)state;
    assert_string_equal(app.cfg.admin_token, "");
    assert_int_equal(app.cfg.admin_allow_loopback, 0);
    struct request r = make_req(HTTP_PUT, "/api/v1/skus/a");
    r.peer_loopback = 1;
    assert_false(router_admin_ok(&app.cfg, &r));
    r.authorization = "Bearer anything";
    assert_false(router_admin_ok(&app.cfg, &r));
    r.authorization = "Bearer ";
    assert_false(router_admin_ok(&app.cfg, &r));

    struct response res = {0};
    struct router_route route;
    bool allowed = true;
    r.authorization = NULL;
    assert_false(router_begin(&app, &r, &res, &route, &allowed));
    assert_false(allowed);
    assert_int_equal(res.status, 401);
    response_free(&res);
}

/* --admin-allow-loopback (development): without a token, loopback clients only. */
static void test_admin_without_token(void **state)
{
    (void)state;
    app.cfg.admin_allow_loopback = 1;
    assert_string_equal(app.cfg.admin_token, "");
    struct request r = make_req(HTTP_PUT, "/api/v1/skus/a");
    r.peer_loopback = 1;
    assert_true(router_admin_ok(&app.cfg, &r));
    r.authorization = "Bearer anything";
    assert_true(router_admin_ok(&app.cfg, &r));
    r.peer_loopback = 0;
    assert_false(router_admin_ok(&app.cfg, &r));
    r.authorization = NULL;
    assert_false(router_admin_ok(&app.cfg, &r));
    r.authorization = "Bearer ";
    assert_false(router_admin_ok(&app.cfg, &r));
}

static void test_media(void **state)
{
    (void)state;
    struct request r = make_req(HTTP_POST, "/api/v1/orders");
    static const struct {
        const char *ctype;
        size_t body_len;
        bool ok;
    } cases[] = {
        {NULL, 0, true},
        {"text/plain", 0, true}, /* no body: Content-Type is irrelevant */
        {"application/json", 5, true},
        {"Application/JSON", 5, true},
        {"application/json; charset=utf-8", 5, true},
        {"application/json;charset=UTF-8", 5, true},
        {NULL, 5, false},
        {"", 5, false},
        {"text/plain", 5, false},
        {"application/x-www-form-urlencoded", 5, false},
        {"application/jsonx", 5, false},
        {"application/json; charset=latin1", 5, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r.content_type = cases[i].ctype;
        r.body = cases[i].body_len ? "{...}" : NULL;
        r.body_len = cases[i].body_len;
        if (router_media_ok(&r) != cases[i].ok)
            fail_msg("case %zu \"%s\" body %zu: expected %d", i,
                     cases[i].ctype ? cases[i].ctype : "(null)", cases[i].body_len, cases[i].ok);
    }
}

/* ---- router_begin / router_end --------------------------------------------------------- */

/* router_begin on req: its verdict, with res freed and the status kept in *status. */
static bool begin(struct request *req, int *status, struct router_route *route)
{
    struct response res = {0};
    bool allowed = true;
    bool go = router_begin(&app, req, &res, route, &allowed);
    *status = res.status;
    if (go)
        assert_int_equal(res.status, 0);
    response_free(&res);
    return go;
}

static void test_begin_404_405(void **state)
{
    (void)state;
    struct request req = make_req(HTTP_GET, "/nope");
    struct response res = {0};
    struct router_route route;
    bool allowed;
    assert_false(router_begin(&app, &req, &res, &route, &allowed));
    assert_int_equal(res.status, 404);
    assert_string_equal(error_of(&res), "not_found");
    assert_null(res.allow);
    response_free(&res);

    req = make_req(HTTP_PUT, "/api/v1/orders/o1");
    assert_false(router_begin(&app, &req, &res, &route, &allowed));
    assert_int_equal(res.status, 405);
    assert_string_equal(error_of(&res), "method_not_allowed");
    assert_non_null(res.allow);
    assert_string_equal(res.allow, "GET, HEAD, DELETE");
    response_free(&res);
}

/* Every admin row: 401 + WWW-Authenticate without authorisation (no token, remote peer; a
 * wrong token); its handler's turn with the token. Every other row needs nothing. */
static void test_begin_admin_rows(void **state)
{
    (void)state;
    size_t n;
    const struct router_row *rows = router_rows(&n);
    for (size_t i = 0; i < n; i++) {
        char path[256];
        sample_path(&rows[i], "a", path, sizeof(path));
        bool admin = rows[i].flags & (ROUTER_ADMIN | ROUTER_CONFIRM); /* needs a token */
        snprintf(app.cfg.admin_token, sizeof(app.cfg.admin_token), "%s", "");
        struct request req = make_req(rows[i].method, path);
        struct response res = {0};
        struct router_route route;
        bool allowed = true;
        bool go = router_begin(&app, &req, &res, &route, &allowed);
        if (go != !admin || allowed != !admin)
            fail_msg("%s %s: went on %d, allowed %d", method_names[rows[i].method], path, go,
                     allowed);
        if (admin) {
            assert_int_equal(res.status, 401);
            assert_string_equal(error_of(&res), "unauthorized");
            assert_int_equal(res.www_authenticate, 1);
        }
        response_free(&res);

        int status;
        snprintf(app.cfg.admin_token, sizeof(app.cfg.admin_token), "%s", "tok");
        req.authorization = "Bearer wrong";
        req.peer_loopback = 1; /* with a token, loopback alone is not enough */
        app.cfg.admin_allow_loopback = 1;
        assert_int_equal(begin(&req, &status, &route), !admin);
        if (admin)
            assert_int_equal(status, 401);
        app.cfg.admin_allow_loopback = 0;
        req.authorization = "Bearer tok";
        req.peer_loopback = 0;
        assert_true(begin(&req, &status, &route));
        assert_ptr_equal(route.row, &rows[i]);
        if (strchr(rows[i].pattern, '{'))
            assert_int_equal(req.param_len, 1); /* router_begin set the request's param */
    }
}

/* ROUTER_CONFIRM: the admin token or the confirm token (--confirm-token-file); ROUTER_ADMIN
 * rows refuse the confirm token; rows with neither need nothing. Tested on router_authorized,
 * the decision router_begin takes for every row, with an identity made from a token file. */
static void test_confirm_flag(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_router-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/confirm", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("pay-T0ken\n", f);
    fclose(f);
    snprintf(app.cfg.confirm_token_file, sizeof(app.cfg.confirm_token_file), "%s", path);
    snprintf(app.cfg.admin_token, sizeof(app.cfg.admin_token), "%s", "adm-T0ken");
    char err[256];
    if (identity_new(&app.cfg, &app.identity, err, sizeof(err)) != 0)
        fail_msg("identity_new: %s", err);
    unlink(path);
    rmdir(dir);

    static const struct {
        const char *auth;
        int loopback;
        bool admin_row, confirm_row;
    } cases[] = {
        {"Bearer adm-T0ken", 0, true, true},
        {"Bearer pay-T0ken", 0, false, true},
        {"bearer  pay-T0ken ", 1, false, true},
        {"Bearer pay-T0ke", 0, false, false},
        {"Bearer pay-T0kenn", 0, false, false},
        {"Bearer wrong", 1, false, false},
        {"pay-T0ken", 0, false, false},
        {"Basic pay-T0ken", 0, false, false},
        {NULL, 1, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct request r = make_req(HTTP_POST, "/api/v1/orders/o-1/confirm");
        r.authorization = cases[i].auth;
        r.peer_loopback = cases[i].loopback;
        if (router_authorized(&app, ROUTER_ADMIN | ROUTER_WRITES, &r) != cases[i].admin_row ||
            router_authorized(&app, ROUTER_CONFIRM | ROUTER_WRITES, &r) != cases[i].confirm_row ||
            !router_authorized(&app, ROUTER_WRITES, &r) || !router_authorized(&app, 0, &r))
            fail_msg("case %zu \"%s\": expected admin %d, confirm %d", i,
                     cases[i].auth ? cases[i].auth : "(null)", cases[i].admin_row,
                     cases[i].confirm_row);
    }
    /* every admin row of the table refuses the confirm token in router_begin */
    size_t n;
    const struct router_row *rows = router_rows(&n);
    for (size_t i = 0; i < n; i++) {
        if (!(rows[i].flags & ROUTER_ADMIN))
            continue;
        char p[256];
        sample_path(&rows[i], "a", p, sizeof(p));
        struct request req = make_req(rows[i].method, p);
        req.authorization = "Bearer pay-T0ken";
        int status;
        struct router_route route;
        assert_false(begin(&req, &status, &route));
        assert_int_equal(status, 401);
    }
    identity_free(app.identity);
    app.identity = NULL;

    /* no confirm token configured: a confirm row takes the admin token only */
    struct request r = make_req(HTTP_POST, "/api/v1/orders/o-1/confirm");
    r.authorization = "Bearer pay-T0ken";
    assert_false(router_authorized(&app, ROUTER_CONFIRM, &r));
    r.authorization = "Bearer adm-T0ken";
    assert_true(router_authorized(&app, ROUTER_CONFIRM, &r));
    /* --admin-allow-loopback without an admin token opens confirm rows as it opens admin rows */
    app.cfg.admin_token[0] = '\0';
    app.cfg.admin_allow_loopback = 1;
    r.authorization = NULL;
    r.peer_loopback = 1;
    assert_true(router_authorized(&app, ROUTER_CONFIRM, &r));
    r.peer_loopback = 0;
    assert_false(router_authorized(&app, ROUTER_CONFIRM, &r));
}

static void test_begin_415(void **state)
{
    (void)state;
    int status;
    struct router_route route;
    struct request req = make_req(HTTP_POST, "/api/v1/orders");
    req.body = "{\"sku\":\"a\"}";
    req.body_len = strlen(req.body);
    req.content_type = "text/plain";
    assert_false(begin(&req, &status, &route));
    assert_int_equal(status, 415);
    req.content_type = NULL;
    assert_false(begin(&req, &status, &route));
    assert_int_equal(status, 415);
    req.content_type = "application/json; charset=utf-8";
    assert_true(begin(&req, &status, &route));

    /* An empty body with any Content-Type reaches the handler (it answers 400 itself). */
    req.body = NULL;
    req.body_len = 0;
    req.content_type = "text/plain";
    assert_true(begin(&req, &status, &route));

    /* 401 comes before 415 on admin routes: say nothing more to an unauthorised client. */
    req = make_req(HTTP_PUT, "/api/v1/skus/a");
    req.body = "x";
    req.body_len = 1;
    req.content_type = "text/plain";
    assert_false(begin(&req, &status, &route));
    assert_int_equal(status, 401);

    /* 404/405 come before 415. */
    req = make_req(HTTP_POST, "/nope");
    req.body = "x";
    req.body_len = 1;
    assert_false(begin(&req, &status, &route));
    assert_int_equal(status, 404);
}

static void test_end_unset_status_is_500(void **state)
{
    (void)state;
    struct request req = make_req(HTTP_GET, "/api/v1/skus/a");
    struct response res = {0};
    struct router_route route;
    bool allowed;
    assert_true(router_begin(&app, &req, &res, &route, &allowed));
    router_end(&app, &req, &route, &res, allowed); /* the handler set nothing */
    assert_int_equal(res.status, 500);
    assert_string_equal(error_of(&res), "internal");
    response_free(&res);
}

/* ---- probes ---------------------------------------------------------------------------- */

/* Runs the row of GET path (one that answers at once) as http.c does. */
static void run_get(const char *path, struct response *res)
{
    struct request req = make_req(HTTP_GET, path);
    struct router_route route;
    bool allowed;
    assert_true(router_begin(&app, &req, res, &route, &allowed));
    assert_non_null(route.row->run);
    route.row->run(&app, &req, res);
    router_end(&app, &req, &route, res, allowed);
}

static void test_healthz(void **state)
{
    (void)state;
    struct response res = {0};
    app.draining = 1; /* alive even while draining */
    run_get("/healthz", &res);
    assert_int_equal(res.status, 200);
    assert_string_equal(json_string_value(json_object_get(res.body, "status")), "ok");
    assert_int_equal(json_object_size(res.body), 1);
    response_free(&res);
}

static void test_readyz_answer(void **state)
{
    (void)state;
    struct response res = {0};
    probe_readyz_answer(LC_OK, NULL, &res);
    assert_int_equal(res.status, 200);
    assert_string_equal(json_string_value(json_object_get(res.body, "status")), "ready");
    response_free(&res);

    /* Issue #10: Redis's own error text (here one naming an address and an auth failure) is
     * logged, never sent: the probe answers anyone. */
    probe_readyz_answer(LC_EIO, "WRONGPASS invalid username-password pair (10.1.2.3:6379)\n\x01",
                        &res);
    assert_int_equal(res.status, 503);
    assert_string_equal(json_string_value(json_object_get(res.body, "status")), "unavailable");
    assert_string_equal(json_string_value(json_object_get(res.body, "reason")),
                        "redis unavailable");
    response_free(&res);

    probe_readyz_answer(LC_EREDIS, "", &res);
    assert_int_equal(res.status, 503);
    assert_non_null(json_string_value(json_object_get(res.body, "reason")));
    response_free(&res);

    probe_readyz_answer(LC_ESTATE, NULL, &res);
    assert_int_equal(res.status, 503);
    assert_string_equal(json_string_value(json_object_get(res.body, "reason")), "shutting down");
    response_free(&res);
}

static void test_metrics_endpoint(void **state)
{
    (void)state;
    metrics_reset();
    metrics_order(METRICS_ORDER_CREATED);
    struct response res = {0};
    run_get("/metrics", &res);
    assert_int_equal(res.status, 200);
    assert_null(res.body);
    assert_non_null(res.text);
    assert_non_null(res.content_type);
    assert_non_null(strstr(res.content_type, "text/plain"));
    assert_non_null(strstr(res.content_type, "version=0.0.4"));
    assert_non_null(strstr(res.text, "inventory_orders_total{result=\"created\"} 1\n"));
    /* one request-duration series per path, named by its row */
    assert_non_null(strstr(res.text, "inventory_http_request_duration_seconds_count{route=\"/"
                                     "api/v1/skus/{sku}/restock\"} 0\n"));
    response_free(&res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_row_reachable, setup),
        cmocka_unit_test_setup(test_rows_well_formed, setup),
        cmocka_unit_test_setup(test_rows_are_the_api, setup),
        cmocka_unit_test_setup(test_labels, setup),
        cmocka_unit_test_setup(test_match_not_found, setup),
        cmocka_unit_test_setup(test_match_method_not_allowed, setup),
        cmocka_unit_test_setup(test_token_equal, setup),
        cmocka_unit_test_setup(test_admin_with_token, setup),
        cmocka_unit_test_setup(test_admin_closed_without_token, setup),
        cmocka_unit_test_setup(test_admin_without_token, setup),
        cmocka_unit_test_setup(test_media, setup),
        cmocka_unit_test_setup(test_begin_404_405, setup),
        cmocka_unit_test_setup(test_begin_admin_rows, setup),
        cmocka_unit_test_setup(test_confirm_flag, setup),
        cmocka_unit_test_setup(test_begin_415, setup),
        cmocka_unit_test_setup(test_end_unset_status_is_500, setup),
        cmocka_unit_test_setup(test_healthz, setup),
        cmocka_unit_test_setup(test_readyz_answer, setup),
        cmocka_unit_test_setup(test_metrics_endpoint, setup),
    };
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
