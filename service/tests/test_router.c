/*
 * Unit tests of service/src/router.c and service/src/probe.c: the route table (every route,
 * HEAD as GET, 404, 405 + Allow), the constant-time token compare, admin authorisation (token,
 * loopback rule, 401 + WWW-Authenticate), the 415 rule, dispatch order, and the three probes.
 *
 * The stock_* / order_* handlers and store_ping live in colleagues' files; this test defines
 * them as WEAK stubs. A static library member is only pulled in to resolve an undefined symbol,
 * and these are already defined here, so stock.o/order.o/store.o are never linked into this
 * test and the stubs never clash with them. Should one ever be pulled in for another reason,
 * its strong definition would win and check_called() would fail loudly instead of the link.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app.h"
#include "handlers.h"
#include "metrics.h"
#include "router.h"

/* ---- stubs ----------------------------------------------------------------------------- */

static const char *called;      /* name of the last stub handler called */
static char called_param[128];  /* its req->param */
static int stub_leave_unset;    /* 1: the stub leaves res->status at 0 */
static int ping_result;         /* what store_ping returns */
static const char *ping_reason; /* what store_ping writes */

static void stub(const char *name, const struct request *req, struct response *res)
{
    called = name;
    snprintf(called_param, sizeof(called_param), "%.*s", (int)req->param_len,
             req->param ? req->param : "");
    if (!stub_leave_unset)
        response_json(res, 299, json_object());
}

#define STUB(name)                                                                           \
    __attribute__((weak)) void name(struct app *app, const struct request *req,              \
                                    struct response *res)                                    \
    {                                                                                        \
        (void)app;                                                                           \
        stub(#name, req, res);                                                               \
    }

STUB(stock_put)
STUB(stock_get)
STUB(stock_delete)
STUB(stock_restock)
STUB(order_create)
STUB(order_get)
STUB(order_cancel)

__attribute__((weak)) int store_ping(struct store *store, char *reason, size_t len)
{
    (void)store;
    called = "store_ping";
    snprintf(reason, len, "%s", ping_reason ? ping_reason : "");
    return ping_result;
}

static struct app app;

static int setup(void **state)
{
    (void)state;
    memset(&app, 0, sizeof(app));
    config_defaults(&app.cfg);
    called = NULL;
    called_param[0] = '\0';
    stub_leave_unset = 0;
    ping_result = 0;
    ping_reason = NULL;
    return 0;
}

/* Fails unless the stub called last is want (NULL: none). */
static void check_called(const char *want)
{
    if (!want) {
        if (called)
            fail_msg("handler %s ran but should not have", called);
        return;
    }
    if (!called || strcmp(called, want) != 0)
        fail_msg("expected stub %s, got %s (is the real one linked in?)", want,
                 called ? called : "nothing");
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

/* ---- router_match ---------------------------------------------------------------------- */

static void test_match_every_route(void **state)
{
    (void)state;
    static const struct {
        enum http_method m;
        const char *path;
        enum router_endpoint ep;
        bool admin;
        const char *param;
    } cases[] = {
        {HTTP_GET, "/", ROUTER_DASHBOARD, false, NULL},
        {HTTP_HEAD, "/", ROUTER_DASHBOARD, false, NULL},
        {HTTP_GET, "/healthz", ROUTER_HEALTHZ, false, NULL},
        {HTTP_HEAD, "/healthz", ROUTER_HEALTHZ, false, NULL},
        {HTTP_GET, "/readyz", ROUTER_READYZ, false, NULL},
        {HTTP_HEAD, "/readyz", ROUTER_READYZ, false, NULL},
        {HTTP_GET, "/metrics", ROUTER_METRICS, false, NULL},
        {HTTP_HEAD, "/metrics", ROUTER_METRICS, false, NULL},
        {HTTP_PUT, "/api/v1/skus/iphone-15", ROUTER_STOCK_PUT, true, "iphone-15"},
        {HTTP_GET, "/api/v1/skus/iphone-15", ROUTER_STOCK_GET, false, "iphone-15"},
        {HTTP_HEAD, "/api/v1/skus/a", ROUTER_STOCK_GET, false, "a"},
        {HTTP_DELETE, "/api/v1/skus/A.b:c_d", ROUTER_STOCK_DELETE, true, "A.b:c_d"},
        {HTTP_POST, "/api/v1/skus/x1/restock", ROUTER_STOCK_RESTOCK, true, "x1"},
        {HTTP_POST, "/api/v1/orders", ROUTER_ORDER_CREATE, false, NULL},
        {HTTP_GET, "/api/v1/orders/o-123", ROUTER_ORDER_GET, false, "o-123"},
        {HTTP_HEAD, "/api/v1/orders/o-123", ROUTER_ORDER_GET, false, "o-123"},
        {HTTP_DELETE, "/api/v1/orders/o-123", ROUTER_ORDER_CANCEL, true, "o-123"},
        /* the param is not validated here: any bytes but '/' */
        {HTTP_GET, "/api/v1/skus/bad sku!%", ROUTER_STOCK_GET, false, "bad sku!%"},
        {HTTP_GET, "/api/v1/skus/restock", ROUTER_STOCK_GET, false, "restock"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct router_route r;
        enum router_outcome o = router_match(cases[i].m, cases[i].path, &r);
        if (o != ROUTER_FOUND)
            fail_msg("case %zu %s: outcome %d", i, cases[i].path, (int)o);
        assert_int_equal(r.outcome, ROUTER_FOUND);
        assert_int_equal(r.endpoint, cases[i].ep);
        assert_int_equal(r.admin, cases[i].admin);
        assert_non_null(r.allow);
        if (cases[i].param) {
            assert_non_null(r.param);
            assert_int_equal(r.param_len, strlen(cases[i].param));
            assert_memory_equal(r.param, cases[i].param, r.param_len);
            /* the param points into the path */
            assert_true(r.param > cases[i].path &&
                        r.param < cases[i].path + strlen(cases[i].path));
        } else {
            assert_null(r.param);
            assert_int_equal(r.param_len, 0);
        }
    }
}

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
        "/api/v1/skus",
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
        assert_int_equal(r.endpoint, ROUTER_NONE);
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
        {HTTP_POST, "/api/v1/skus/a", "GET, HEAD, PUT, DELETE"},
        {HTTP_OTHER, "/api/v1/skus/a", "GET, HEAD, PUT, DELETE"},
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
        assert_int_equal(r.endpoint, ROUTER_NONE);
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
    assert_false(router_token_equal("secret", 6, "secre", 5));   /* prefix */
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
    r.authorization = NULL;
    router_dispatch(&app, &r, &res);
    check_called(NULL);
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
                     cases[i].ctype ? cases[i].ctype : "(null)", cases[i].body_len,
                     cases[i].ok);
    }
}

/* ---- router_dispatch ------------------------------------------------------------------- */

static void dispatch_expect(enum http_method m, const char *path, const char *handler,
                            const char *param)
{
    struct request req = make_req(m, path);
    req.peer_loopback = 1; /* admin allowed: no token configured, loopback allowed */
    app.cfg.admin_allow_loopback = 1;
    struct response res = {0};
    called = NULL;
    router_dispatch(&app, &req, &res);
    check_called(handler);
    assert_int_equal(res.status, 299);
    assert_string_equal(called_param, param);
    response_free(&res);
}

static void test_dispatch_every_handler(void **state)
{
    (void)state;
    dispatch_expect(HTTP_PUT, "/api/v1/skus/s1", "stock_put", "s1");
    dispatch_expect(HTTP_GET, "/api/v1/skus/s1", "stock_get", "s1");
    dispatch_expect(HTTP_HEAD, "/api/v1/skus/s1", "stock_get", "s1");
    dispatch_expect(HTTP_DELETE, "/api/v1/skus/s1", "stock_delete", "s1");
    dispatch_expect(HTTP_POST, "/api/v1/skus/s1/restock", "stock_restock", "s1");
    dispatch_expect(HTTP_POST, "/api/v1/orders", "order_create", "");
    dispatch_expect(HTTP_GET, "/api/v1/orders/o9", "order_get", "o9");
    dispatch_expect(HTTP_HEAD, "/api/v1/orders/o9", "order_get", "o9");
    dispatch_expect(HTTP_DELETE, "/api/v1/orders/o9", "order_cancel", "o9");
}

static void test_dispatch_404_405(void **state)
{
    (void)state;
    struct request req = make_req(HTTP_GET, "/nope");
    struct response res = {0};
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 404);
    assert_string_equal(error_of(&res), "not_found");
    assert_null(res.allow);
    response_free(&res);

    req = make_req(HTTP_PUT, "/api/v1/orders/o1");
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 405);
    assert_string_equal(error_of(&res), "method_not_allowed");
    assert_non_null(res.allow);
    assert_string_equal(res.allow, "GET, HEAD, DELETE");
    response_free(&res);
}

static void test_dispatch_admin_401(void **state)
{
    (void)state;
    /* No token configured, remote peer: refused. */
    struct request req = make_req(HTTP_DELETE, "/api/v1/orders/o1");
    struct response res = {0};
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 401);
    assert_string_equal(error_of(&res), "unauthorized");
    assert_int_equal(res.www_authenticate, 1);
    response_free(&res);

    /* Non-admin routes need nothing. */
    req = make_req(HTTP_GET, "/api/v1/orders/o1");
    router_dispatch(&app, &req, &res);
    check_called("order_get");
    response_free(&res);

    /* With a token: loopback alone is not enough, the right token is (even with
     * admin_allow_loopback, which only applies without a token). */
    app.cfg.admin_allow_loopback = 1;
    snprintf(app.cfg.admin_token, sizeof(app.cfg.admin_token), "%s", "tok");
    called = NULL;
    req = make_req(HTTP_PUT, "/api/v1/skus/a");
    req.peer_loopback = 1;
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 401);
    assert_int_equal(res.www_authenticate, 1);
    response_free(&res);

    req.authorization = "Bearer wrong";
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 401);
    response_free(&res);

    req.authorization = "Bearer tok";
    req.peer_loopback = 0;
    router_dispatch(&app, &req, &res);
    check_called("stock_put");
    assert_int_equal(res.status, 299);
    response_free(&res);
}

static void test_dispatch_415(void **state)
{
    (void)state;
    struct request req = make_req(HTTP_POST, "/api/v1/orders");
    req.body = "{\"sku\":\"a\"}";
    req.body_len = strlen(req.body);
    req.content_type = "text/plain";
    struct response res = {0};
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 415);
    assert_string_equal(error_of(&res), "unsupported_media_type");
    response_free(&res);

    req.content_type = NULL;
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 415);
    response_free(&res);

    req.content_type = "application/json; charset=utf-8";
    router_dispatch(&app, &req, &res);
    check_called("order_create");
    response_free(&res);

    /* An empty body with any Content-Type reaches the handler (it answers 400 itself). */
    called = NULL;
    req.body = NULL;
    req.body_len = 0;
    req.content_type = "text/plain";
    router_dispatch(&app, &req, &res);
    check_called("order_create");
    response_free(&res);

    /* 401 comes before 415 on admin routes: say nothing more to an unauthorised client. */
    called = NULL;
    req = make_req(HTTP_PUT, "/api/v1/skus/a");
    req.body = "x";
    req.body_len = 1;
    req.content_type = "text/plain";
    router_dispatch(&app, &req, &res);
    check_called(NULL);
    assert_int_equal(res.status, 401);
    response_free(&res);

    /* 404/405 come before 415. */
    req = make_req(HTTP_POST, "/nope");
    req.body = "x";
    req.body_len = 1;
    router_dispatch(&app, &req, &res);
    assert_int_equal(res.status, 404);
    response_free(&res);
}

static void test_dispatch_unset_status_is_500(void **state)
{
    (void)state;
    stub_leave_unset = 1;
    struct request req = make_req(HTTP_GET, "/api/v1/skus/a");
    struct response res = {0};
    router_dispatch(&app, &req, &res);
    check_called("stock_get");
    assert_int_equal(res.status, 500);
    assert_string_equal(error_of(&res), "internal");
    response_free(&res);
}

/* ---- probes ---------------------------------------------------------------------------- */

static void test_healthz(void **state)
{
    (void)state;
    struct request req = make_req(HTTP_GET, "/healthz");
    struct response res = {0};
    app.draining = 1; /* alive even while draining */
    router_dispatch(&app, &req, &res);
    assert_int_equal(res.status, 200);
    assert_string_equal(json_string_value(json_object_get(res.body, "status")), "ok");
    assert_int_equal(json_object_size(res.body), 1);
    response_free(&res);
}

static void test_readyz(void **state)
{
    (void)state;
    struct request req = make_req(HTTP_GET, "/readyz");
    struct response res = {0};
    ping_result = 0;
    router_dispatch(&app, &req, &res);
    check_called("store_ping");
    assert_int_equal(res.status, 200);
    assert_string_equal(json_string_value(json_object_get(res.body, "status")), "ready");
    response_free(&res);

    /* Issue #10: Redis's own error text (here one naming an address and an auth failure) is
     * logged, never sent: the probe answers anyone. */
    ping_result = -1;
    ping_reason = "WRONGPASS invalid username-password pair (10.1.2.3:6379)\n\x01";
    router_dispatch(&app, &req, &res);
    assert_int_equal(res.status, 503);
    assert_string_equal(json_string_value(json_object_get(res.body, "status")), "unavailable");
    assert_string_equal(json_string_value(json_object_get(res.body, "reason")),
                        "redis unavailable");
    response_free(&res);

    ping_reason = "";
    router_dispatch(&app, &req, &res);
    assert_int_equal(res.status, 503);
    assert_non_null(json_string_value(json_object_get(res.body, "reason")));
    response_free(&res);

    called = NULL;
    ping_result = 0;
    app.draining = 1;
    router_dispatch(&app, &req, &res);
    check_called(NULL); /* no Redis round trip while draining */
    assert_int_equal(res.status, 503);
    assert_string_equal(json_string_value(json_object_get(res.body, "reason")),
                        "shutting down");
    response_free(&res);
}

static void test_metrics_endpoint(void **state)
{
    (void)state;
    metrics_reset();
    metrics_order(METRICS_ORDER_CREATED);
    struct request req = make_req(HTTP_GET, "/metrics");
    struct response res = {0};
    router_dispatch(&app, &req, &res);
    assert_int_equal(res.status, 200);
    assert_null(res.body);
    assert_non_null(res.text);
    assert_non_null(res.content_type);
    assert_non_null(strstr(res.content_type, "text/plain"));
    assert_non_null(strstr(res.content_type, "version=0.0.4"));
    assert_non_null(strstr(res.text, "inventory_orders_total{result=\"created\"} 1\n"));
    response_free(&res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_match_every_route, setup),
        cmocka_unit_test_setup(test_match_not_found, setup),
        cmocka_unit_test_setup(test_match_method_not_allowed, setup),
        cmocka_unit_test_setup(test_token_equal, setup),
        cmocka_unit_test_setup(test_admin_with_token, setup),
        cmocka_unit_test_setup(test_admin_closed_without_token, setup),
        cmocka_unit_test_setup(test_admin_without_token, setup),
        cmocka_unit_test_setup(test_media, setup),
        cmocka_unit_test_setup(test_dispatch_every_handler, setup),
        cmocka_unit_test_setup(test_dispatch_404_405, setup),
        cmocka_unit_test_setup(test_dispatch_admin_401, setup),
        cmocka_unit_test_setup(test_dispatch_415, setup),
        cmocka_unit_test_setup(test_dispatch_unset_status_is_500, setup),
        cmocka_unit_test_setup(test_healthz, setup),
        cmocka_unit_test_setup(test_readyz, setup),
        cmocka_unit_test_setup(test_metrics_endpoint, setup),
    };
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
