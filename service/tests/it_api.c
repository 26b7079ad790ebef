/*
 * The REST API of SPEC §5 over real HTTP against a real inventoryd and redis-server: every row
 * of the table and every error code (400 invalid_request, 401 unauthorized, 404 not_found /
 * unknown_sku / unknown_order, 405 + Allow, 409 sold_out / insufficient_stock /
 * already_cancelled, 413 body_too_large, 415 unsupported_media_type, 503 unavailable /
 * lock_timeout + Retry-After), the exact fields of the SKU status and order objects,
 * Idempotency-Key replays (also 8 concurrent requests with one new key), the probes, the
 * command line's exit status 2, a clean SIGTERM, and Redis going away and coming back.
 * After every state change the Redis invariant checker confirms what the API said.
 */
#include "svc_test.h"

#include "rules.h"

#include <pthread.h>
#include <signal.h>

static sf_service *svc; /* --admin-token TOKEN */
static int port;

static const char TOKEN[] = "it-api-secret-token";

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--admin-token", TOKEN, "--threads", "8", NULL};
    svc = sf_group_service(args);
    port = svc != NULL ? sf_port(svc) : 0;
    return svc != NULL ? 0 : -1;
}

/* ---- helpers ---- */

static char *new_sku(char *buf, size_t size)
{
    return tu_unique_name(buf, size, "api");
}

static void sku_path(char *buf, size_t size, const char *sku)
{
    snprintf(buf, size, "/api/v1/skus/%s", sku);
}

/* GET status (asserting 200). New reference. */
static json_t *status_of(int p, const char *sku)
{
    json_t *st = sf_sku_status(p, sku);
    SF_ASSERT(st != NULL, "GET status of %s failed", sku);
    return st;
}

/* Orders quantity units on port p, asserting 201; returns the order (new reference). */
static json_t *order_ok(int p, const char *sku, long long qty)
{
    sf_resp r = {0};
    sf_order(NULL, p, sku, qty, &r);
    SF_ASSERT_STATUS(&r, 201);
    json_t *o = json_incref(r.json);
    sf_resp_free(&r);
    return o;
}

/* Asserts that GET status and the Redis checker agree on the totals and that they are the
 * expected ones. */
static void expect_totals(const char *sku, long long total, long long remaining, long long sold,
                          long long orders)
{
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    json_t *st = status_of(port, sku);
    char *text = json_dumps(st, JSON_COMPACT);
    SF_ASSERT(sf_json_int(st, "stock_total", -1) == total &&
                  sf_json_int(st, "remaining", -1) == remaining &&
                  sf_json_int(st, "sold", -1) == sold && sf_json_int(st, "orders", -1) == orders,
              "expected stock_total %lld remaining %lld sold %lld orders %lld, got %s", total,
              remaining, sold, orders, text);
    SF_ASSERT(rep.stock_total == total && rep.remaining == remaining && rep.sold == sold &&
                  rep.orders == orders,
              "Redis says stock_total %lld remaining %lld sold %lld orders %lld; API said %s",
              rep.stock_total, rep.remaining, rep.sold, rep.orders, text);
    free(text);
    json_decref(st);
}

/* True when obj has exactly the n member names in keys. */
static int has_exactly(const json_t *obj, const char *const *keys, size_t n)
{
    if (!json_is_object(obj) || json_object_size(obj) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (json_object_get(obj, keys[i]) == NULL)
            return 0;
    return 1;
}

/* has_exactly, with one member per sale rule besides (rules_table.h: docs/openapi.yaml is
 * checked against the same rows by test_rules). */
static int has_exactly_and_rules(const json_t *obj, const char *const *keys, size_t n)
{
    if (!json_is_object(obj) || json_object_size(obj) != n + RULES_N)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (json_object_get(obj, keys[i]) == NULL)
            return 0;
    for (int i = 0; i < RULES_N; i++)
        if (json_object_get(obj, rules_rows[i].json) == NULL)
            return 0;
    return 1;
}

static char *dump(const json_t *j)
{
    static char buf[2048];
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    snprintf(buf, sizeof buf, "%s", t ? t : "(null)");
    free(t);
    return buf;
}

/* ---- PUT / GET / restock / DELETE ---- */

static void test_put_created_then_replaced(void **state)
{
    (void)state;
    char sku[64], path[128];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);

    sf_resp r = {0};
    sf_put_sku(port, TOKEN, sku, 100, 4, &r);
    SF_ASSERT_STATUS(&r, 201);
    static const char *const put_keys[] = {"sku", "stock", "segments", "version"};
    SF_ASSERT(has_exactly_and_rules(r.json, put_keys, 4), "PUT body %s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "sku"), sku) == 0, "%s", r.body);
    SF_ASSERT_EQ(sf_json_int(r.json, "stock", -1), 100);
    SF_ASSERT_EQ(sf_json_int(r.json, "segments", -1), 4);
    long long v1 = sf_json_int(r.json, "version", -1);
    SF_ASSERT(v1 >= 1, "version %lld", v1);

    sf_put_sku(port, TOKEN, sku, 50, 2, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(has_exactly_and_rules(r.json, put_keys, 4), "PUT body %s", r.body);
    long long v2 = sf_json_int(r.json, "version", -1);
    SF_ASSERT(v2 > v1, "version went from %lld to %lld", v1, v2);
    SF_ASSERT_EQ(sf_json_int(r.json, "stock", -1), 50);
    SF_ASSERT_EQ(sf_json_int(r.json, "segments", -1), 2);
    sf_resp_free(&r);

    /* The old layout (4 segments) is gone: the checker also looks for stray segment keys. */
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.version, v2);
    SF_ASSERT_EQ(rep.segments, 2);
    json_t *st = status_of(port, sku);
    SF_ASSERT_EQ(sf_json_int(st, "version", -1), v2);
    SF_ASSERT_EQ(json_array_size(json_object_get(st, "segments")), 2);
    json_decref(st);
    expect_totals(sku, 50, 50, 0, 0);

    /* A third PUT keeps counting up. */
    long long v3 = SF_PUT_SKU(port, TOKEN, sku, 7, 7);
    SF_ASSERT(v3 > v2, "version went from %lld to %lld", v2, v3);
    expect_totals(sku, 7, 7, 0, 0);
}

/* The SPEC §5 status object; snap: a GET's, from the snapshot (SPEC §15), which adds "sale",
 * "as_of" and "refresh_ms". */
static void check_status_shape(const json_t *st, const char *sku, int nseg, int snap)
{
    static const char *const keys[] = {"sku",      "version",  "stock_total", "remaining",
                                       "sold",     "reserved", "orders",      "sold_out",
                                       "segments", "sale",     "as_of",       "refresh_ms"};
    SF_ASSERT(has_exactly_and_rules(st, keys, snap ? 12 : 9), "status members: %s", dump(st));
    if (snap) {
        const char *sale = sf_str(st, "sale");
        SF_ASSERT(sale && (strcmp(sale, "open") == 0 || strcmp(sale, "not_started") == 0 ||
                           strcmp(sale, "ended") == 0),
                  "sale: %s", dump(st));
        SF_ASSERT(json_is_string(json_object_get(st, "as_of")), "as_of: %s", dump(st));
        SF_ASSERT(sf_json_int(st, "refresh_ms", -1) == 0, "refresh_ms (the suites run with 0): %s",
                  dump(st));
    }
    SF_ASSERT(json_is_string(json_object_get(st, "sku")) && strcmp(sf_str(st, "sku"), sku) == 0,
              "%s", dump(st));
    static const char *const ints[] = {"version",        "stock_total",      "remaining",
                                       "sold",           "orders",           "reserved",
                                       "limit_per_user", "reservation_ttl_s"};
    for (size_t i = 0; i < 8; i++)
        SF_ASSERT(json_is_integer(json_object_get(st, ints[i])), "%s not an integer: %s", ints[i],
                  dump(st));
    SF_ASSERT(json_is_boolean(json_object_get(st, "sold_out")), "%s", dump(st));
    const json_t *segs = json_object_get(st, "segments");
    SF_ASSERT(json_is_array(segs) && json_array_size(segs) == (size_t)nseg, "%s", dump(st));
    long long rem = 0, sold = 0;
    static const char *const seg_keys[] = {"index", "remaining", "sold", "reserved"};
    for (size_t i = 0; i < json_array_size(segs); i++) {
        const json_t *s = json_array_get(segs, i);
        SF_ASSERT(has_exactly(s, seg_keys, 4), "segment %zu: %s", i, dump(s));
        SF_ASSERT_EQ(sf_json_int(s, "index", -1), (long long)i);
        rem += sf_json_int(s, "remaining", -1000000);
        sold += sf_json_int(s, "sold", -1000000);
    }
    SF_ASSERT_EQ(rem, sf_json_int(st, "remaining", -1));
    SF_ASSERT_EQ(sold, sf_json_int(st, "sold", -1));
    SF_ASSERT_EQ(sf_json_int(st, "sold", -1),
                 sf_json_int(st, "stock_total", -1) - sf_json_int(st, "remaining", -1));
}

static void test_status_fields(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    long long v = SF_PUT_SKU(port, TOKEN, sku, 10, 4);
    json_t *st = status_of(port, sku);
    check_status_shape(st, sku, 4, 1);
    SF_ASSERT_EQ(sf_json_int(st, "version", -1), v);
    SF_ASSERT_EQ(sf_json_int(st, "stock_total", -1), 10);
    SF_ASSERT(json_is_false(json_object_get(st, "sold_out")), "%s", dump(st));
    json_decref(st);
    expect_totals(sku, 10, 10, 0, 0);

    json_t *o = order_ok(port, sku, 2);
    long long seg = sf_json_int(o, "segment", -1);
    SF_ASSERT(seg >= 0 && seg < 4, "%s", dump(o));
    json_decref(o);
    st = status_of(port, sku);
    check_status_shape(st, sku, 4, 1);
    const json_t *s = json_array_get(json_object_get(st, "segments"), (size_t)seg);
    SF_ASSERT_EQ(sf_json_int(s, "sold", -1), 2);
    json_decref(st);
    expect_totals(sku, 10, 8, 2, 1);

    /* Sell the rest one unit at a time: then sold_out is true and remaining 0. */
    for (int i = 0; i < 8; i++)
        json_decref(order_ok(port, sku, 1));
    st = status_of(port, sku);
    check_status_shape(st, sku, 4, 1);
    SF_ASSERT(json_is_true(json_object_get(st, "sold_out")), "%s", dump(st));
    json_decref(st);
    expect_totals(sku, 10, 0, 10, 9);
}

static void test_unknown_sku(void **state)
{
    (void)state;
    char sku[64], path[160];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);
    sf_resp r = {0};
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_restock(port, TOKEN, sku, 5, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_json_request(NULL, port, "DELETE", path, TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_resp_free(&r);
    /* None of that created anything. */
    sf_report rep;
    SF_ASSERT(sf_check_invariants(rf_url(gf_redis), sku, &rep) == 0 && !rep.found,
              "unknown SKU %s exists in Redis after the 404s", sku);
}

static void test_restock(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    long long v = SF_PUT_SKU(port, TOKEN, sku, 8, 4);
    json_decref(order_ok(port, sku, 1));
    sf_resp r = {0};
    sf_restock(port, TOKEN, sku, 6, &r);
    SF_ASSERT_STATUS(&r, 200);
    /* The status object, plus exactly what this restock added. */
    SF_ASSERT_EQ(sf_json_int(r.json, "added", -1), 6);
    json_object_del(r.json, "added");
    check_status_shape(r.json, sku, 4, 0);
    SF_ASSERT_EQ(sf_json_int(r.json, "version", -1), v);
    SF_ASSERT_EQ(sf_json_int(r.json, "stock_total", -1), 14);
    SF_ASSERT_EQ(sf_json_int(r.json, "remaining", -1), 13);
    SF_ASSERT_EQ(sf_json_int(r.json, "sold", -1), 1);
    SF_ASSERT_EQ(sf_json_int(r.json, "orders", -1), 1);
    sf_resp_free(&r);
    expect_totals(sku, 14, 13, 1, 1);
}

static void test_delete(void **state)
{
    (void)state;
    char sku[64], path[160], opath[256];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);
    SF_PUT_SKU(port, TOKEN, sku, 6, 2);
    json_t *o = order_ok(port, sku, 1);
    snprintf(opath, sizeof opath, "/api/v1/orders/%s",
             json_string_value(json_object_get(o, "order_id")));
    json_decref(o);

    sf_resp r = {0};
    sf_json_request(NULL, port, "DELETE", path, TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    SF_ASSERT(r.body_len == 0, "204 with a body: %s", r.body);
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_json_request(NULL, port, "DELETE", path, TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_http(port, "GET", opath, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_resp_free(&r);
    for (int k = 0; k < 2; k++) {
        long long n = rf_integer(gf_redis,
                                 "EXISTS inv:2:{%s/%d}:stock inv:2:{%s/%d}:cnt "
                                 "inv:2:{%s/%d}:orders inv:2:{%s/%d}:idem",
                                 sku, k, sku, k, sku, k, sku, k);
        SF_ASSERT(n == 0, "%lld keys of segment %d of the deleted SKU remain", n, k);
    }
    /* What stays: the meta as a layout of 0 segments and each segment's version (tombstones,
     * so that a slower, older PUT cannot bring the SKU back). */
    char segs[16] = "";
    SF_ASSERT(rf_string(gf_redis, segs, sizeof segs, "HGET inv:2:{%s}:meta segments", sku) == 1 &&
                  strcmp(segs, "0") == 0,
              "meta.segments '%s' after DELETE", segs);
    /* A new PUT of the same name starts afresh, with a higher version than ever before. */
    long long v = SF_PUT_SKU(port, TOKEN, sku, 3, 1);
    SF_ASSERT(v >= 2, "version %lld after DELETE + PUT", v);
    expect_totals(sku, 3, 3, 0, 0);
}

/* ---- orders ---- */

static int iso8601_utc(const char *s)
{
    /* YYYY-MM-DDTHH:MM:SS[.fff]Z */
    static const char pat[] = "dddd-dd-ddTdd:dd:dd";
    if (s == NULL || strlen(s) < sizeof pat)
        return 0;
    for (size_t i = 0; i < sizeof pat - 1; i++) {
        if (pat[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != pat[i])
            return 0;
    }
    return s[strlen(s) - 1] == 'Z';
}

static void test_order_fields(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 10, 2);

    char body[256];
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"quantity\": 2, \"user_id\": \"alice\"}", sku);
    sf_resp r = {0};
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    static const char *const keys[] = {"order_id", "sku",        "quantity", "segment",
                                       "user_id",  "created_at", "status",   "parts"};
    SF_ASSERT(has_exactly(r.json, keys, 8), "order members: %s", r.body);
    const char *id = json_string_value(json_object_get(r.json, "order_id"));
    SF_ASSERT(id != NULL && *id != '\0', "%s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "sku"), sku) == 0, "%s", r.body);
    SF_ASSERT_EQ(sf_json_int(r.json, "quantity", -1), 2);
    long long seg = sf_json_int(r.json, "segment", -1);
    SF_ASSERT(seg == 0 || seg == 1, "%s", r.body);
    const char *user = json_string_value(json_object_get(r.json, "user_id"));
    SF_ASSERT(user != NULL && strcmp(user, "alice") == 0, "%s", r.body);
    SF_ASSERT(iso8601_utc(json_string_value(json_object_get(r.json, "created_at"))), "%s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "created") == 0, "%s", r.body);
    char want_loc[256];
    snprintf(want_loc, sizeof want_loc, "/api/v1/orders/%s", id);
    const char *loc = sf_header(&r, "Location");
    SF_ASSERT(loc != NULL && strcmp(loc, want_loc) == 0, "Location %s, expected %s",
              loc ? loc : "(none)", want_loc);

    /* GET at the Location gives the same order, with its parts (SPEC §13): a one-segment
     * order has one, its segment and quantity. */
    sf_resp g = {0};
    sf_http(port, "GET", want_loc, NULL, NULL, 0, &g);
    SF_ASSERT_STATUS(&g, 200);
    json_t *parts = json_object_get(g.json, "parts");
    json_t *part = json_array_get(parts, 0);
    SF_ASSERT(json_array_size(parts) == 1 && sf_json_int(part, "segment", -1) == seg &&
                  sf_json_int(part, "quantity", -1) == 2,
              "GET %s = %s", want_loc, g.body);
    SF_ASSERT(json_equal(g.json, r.json), "GET %s = %s, POST gave %s", want_loc, g.body, r.body);
    sf_resp_free(&g);
    sf_resp_free(&r);

    /* Without user_id and quantity: quantity 1; the order still has all eight members. */
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"extra\": {\"ignored\": [1, 2]}}", sku);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(has_exactly(r.json, keys, 8), "order members: %s", r.body);
    SF_ASSERT_EQ(sf_json_int(r.json, "quantity", -1), 1);
    sf_resp_free(&r);

    /* Unknown orders: a well-formed id that does not exist, and garbage. */
    char missing[256];
    snprintf(missing, sizeof missing, "/api/v1/orders/0123456789abcdef0123456789abcdef-0-%s", sku);
    sf_http(port, "GET", missing, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_http(port, "GET", "/api/v1/orders/not-an-order-id", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_resp_free(&r);
    expect_totals(sku, 10, 7, 3, 2);
}

static void test_cancel(void **state)
{
    (void)state;
    char sku[64], opath[256];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 10, 2);
    json_t *o = order_ok(port, sku, 3);
    json_t *keep = order_ok(port, sku, 1);
    const char *id = json_string_value(json_object_get(o, "order_id"));
    snprintf(opath, sizeof opath, "/api/v1/orders/%s", id);
    expect_totals(sku, 10, 6, 4, 2);

    static const char *const keys[] = {"order_id", "sku",        "quantity", "segment",
                                       "user_id",  "created_at", "status",   "parts"};
    sf_resp r = {0};
    sf_json_request(NULL, port, "DELETE", opath, TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(has_exactly(r.json, keys, 8), "cancelled order members: %s", r.body);
    SF_ASSERT(
        json_array_size(json_object_get(r.json, "parts")) == 1 &&
            sf_json_int(json_array_get(json_object_get(r.json, "parts"), 0), "quantity", -1) == 3,
        "%s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "cancelled") == 0, "%s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "order_id"), id) == 0, "%s", r.body);
    SF_ASSERT_EQ(sf_json_int(r.json, "quantity", -1), 3);
    /* The units went back: remaining grows by 3, sold and orders drop. */
    expect_totals(sku, 10, 9, 1, 1);

    sf_http(port, "GET", opath, NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(has_exactly(r.json, keys, 8), "cancelled order members: %s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "cancelled") == 0, "%s", r.body);
    SF_ASSERT(json_equal(json_object_get(r.json, "created_at"), json_object_get(o, "created_at")) &&
                  json_equal(json_object_get(r.json, "user_id"), json_object_get(o, "user_id")) &&
                  json_equal(json_object_get(r.json, "segment"), json_object_get(o, "segment")),
              "the cancelled record %s differs from the order %s", r.body, dump(o));

    sf_json_request(NULL, port, "DELETE", opath, TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "already_cancelled");
    char missing[256];
    snprintf(missing, sizeof missing, "/api/v1/orders/fedcba9876543210fedcba9876543210-1-%s", sku);
    sf_json_request(NULL, port, "DELETE", missing, TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_json_request(NULL, port, "DELETE", "/api/v1/orders/garbage", TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_resp_free(&r);
    /* Nothing moved twice. */
    sf_report rep;
    expect_totals(sku, 10, 9, 1, 1);
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.cancelled, 1);
    json_decref(o);
    json_decref(keep);
}

/* ---- errors ---- */

/* Copies tmpl into out replacing $SKU, LONGSKU and LONGUSER. */
static void expand_template(char *out, size_t size, const char *tmpl, const char *sku,
                            const char *long_sku, const char *long_user)
{
    size_t n = 0;
    while (*tmpl != '\0' && n + 1 < size) {
        const char *rep = NULL;
        size_t skip = 0;
        if (strncmp(tmpl, "$SKU", 4) == 0)
            rep = sku, skip = 4;
        else if (strncmp(tmpl, "LONGSKU", 7) == 0)
            rep = long_sku, skip = 7;
        else if (strncmp(tmpl, "LONGUSER", 8) == 0)
            rep = long_user, skip = 8;
        if (rep != NULL) {
            n += (size_t)snprintf(out + n, size - n, "%s", rep);
            if (n >= size)
                n = size - 1;
            tmpl += skip;
        } else {
            out[n++] = *tmpl++;
        }
    }
    out[n] = '\0';
}

static void test_invalid_requests_change_nothing(void **state)
{
    (void)state;
    char sku[64], path[160], restock[200];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);
    snprintf(restock, sizeof restock, "%s/restock", path);
    long long v = SF_PUT_SKU(port, TOKEN, sku, 10, 2);

    char long_sku[80], long_user[140];
    memset(long_sku, 'a', 65);
    long_sku[65] = '\0';
    memset(long_user, 'u', 129);
    long_user[129] = '\0';
    /* $SKU stands for the SKU, LONGSKU for 65 characters, LONGUSER for 129. */
    const char *orders[] = {
        "",
        "{",
        "not json",
        "[]",
        "\"x\"",
        "{\"sku\": \"$SKU\"",
        "{\"sku\": 5}",
        "{\"quantity\": 1}",
        "{\"sku\": \"$SKU\", \"quantity\": 0}",
        "{\"sku\": \"$SKU\", \"quantity\": -1}",
        "{\"sku\": \"$SKU\", \"quantity\": 101}",
        "{\"sku\": \"$SKU\", \"quantity\": 1.5}",
        "{\"sku\": \"$SKU\", \"quantity\": 1.0}",
        "{\"sku\": \"$SKU\", \"quantity\": \"1\"}",
        "{\"sku\": \"$SKU\", \"quantity\": true}",
        "{\"sku\": \"$SKU\", \"quantity\": null}",
        "{\"sku\": \"$SKU\", \"quantity\": 99999999999999999999999}",
        "{\"sku\": \"$SKU\", \"sku\": \"$SKU\"}",
        "{\"sku\": \"$SKU\", \"quantity\": 1, \"quantity\": 2}",
        "{\"sku\": \"bad sku!\"}",
        "{\"sku\": \"\"}",
        "{\"sku\": \"LONGSKU\"}",
        "{\"sku\": \"$SKU\", \"user_id\": \"\"}",
        "{\"sku\": \"$SKU\", \"user_id\": \"LONGUSER\"}",
        "{\"sku\": \"$SKU\", \"user_id\": \"tab\\there\"}",
        "{\"sku\": \"$SKU\", \"user_id\": 7}",
        "{\"sku\": \"$SKU\"} trailing",
        "{\"sku\": \"$SKU\"}{}",
    };
    sf_resp r = {0};
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        char body[600];
        expand_template(body, sizeof body, orders[i], sku, long_sku, long_user);
        sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r);
        if (r.status != 400)
            sf_fail_at(__FILE__, __LINE__, "bad order body accepted", "body %s: %s", body,
                       sf_resp_summary(&r));
        SF_ASSERT_ERROR(&r, 400, "invalid_request");
    }
    /* A bad Idempotency-Key on a good body. */
    char good[200];
    snprintf(good, sizeof good, "{\"sku\": \"%s\"}", sku);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, long_user, good, &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");

    const char *puts[] = {
        "{\"stock\": -1, \"segments\": 2}",
        "{\"stock\": 10, \"segments\": 0}",
        "{\"stock\": 10, \"segments\": 1025}",
        "{\"stock\": 1000000000001, \"segments\": 1}",
        "{\"stock\": 10}",
        "{\"segments\": 2}",
        "{\"stock\": \"10\", \"segments\": 2}",
        "{\"stock\": 10.0, \"segments\": 2}",
        "{\"stock\": 10, \"segments\": 2, \"stock\": 5}",
        "{\"stock\": 10, \"segments\": 2",
        "[10, 2]",
        "",
    };
    for (size_t i = 0; i < sizeof puts / sizeof puts[0]; i++) {
        sf_json_request(NULL, port, "PUT", path, TOKEN, NULL, puts[i], &r);
        if (r.status != 400)
            sf_fail_at(__FILE__, __LINE__, "bad PUT body accepted", "body %s: %s", puts[i],
                       sf_resp_summary(&r));
        SF_ASSERT_ERROR(&r, 400, "invalid_request");
    }
    const char *restocks[] = {
        "{\"quantity\": 0}",
        "{\"quantity\": -5}",
        "{}",
        "{\"quantity\": \"5\"}",
        "{\"quantity\": 1000000000001}",
        "{\"quantity\": 2.5}",
        "",
    };
    for (size_t i = 0; i < sizeof restocks / sizeof restocks[0]; i++) {
        sf_json_request(NULL, port, "POST", restock, TOKEN, NULL, restocks[i], &r);
        if (r.status != 400)
            sf_fail_at(__FILE__, __LINE__, "bad restock body accepted", "body %s: %s", restocks[i],
                       sf_resp_summary(&r));
        SF_ASSERT_ERROR(&r, 400, "invalid_request");
    }
    /* An invalid SKU in the path. */
    sf_put_sku(port, TOKEN, "bad$sku", 5, 1, &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    sf_resp_free(&r);

    /* Nothing changed: same version, same stock, no orders. */
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.version, v);
    SF_ASSERT_EQ(rep.segments, 2);
    expect_totals(sku, 10, 10, 0, 0);
}

static void test_not_found(void **state)
{
    (void)state;
    const char *paths[] = {"//",
                           "/index.html",
                           "/nope",
                           "/api/v1/skus/",
                           "/api/v1/skus/X/extra",
                           "/api/v1/skus/X/restock/more",
                           "/api/v1/orders/",
                           "/api/v2/orders",
                           "/healthz/x",
                           "/API/v1/orders"};
    sf_resp r = {0};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        sf_http(port, "GET", paths[i], NULL, NULL, 0, &r);
        if (r.status != 404)
            sf_fail_at(__FILE__, __LINE__, "unknown path", "GET %s: %s", paths[i],
                       sf_resp_summary(&r));
        SF_ASSERT_ERROR(&r, 404, "not_found");
    }
    sf_resp_free(&r);
}

static void test_method_not_allowed(void **state)
{
    (void)state;
    struct {
        const char *method, *path, *must_allow[3];
    } cases[] = {
        {"OPTIONS", "/api/v1/skus/X", {"GET", "PUT", "DELETE"}},
        {"POST", "/api/v1/skus/X", {"GET", "PUT", "PATCH"}},
        {"PATCH", "/api/v1/orders/abc", {"GET", "DELETE", NULL}},
        {"GET", "/api/v1/orders", {"POST", NULL, NULL}},
        {"DELETE", "/api/v1/orders", {"POST", NULL, NULL}},
        {"PUT", "/api/v1/orders/abc", {"GET", "DELETE", NULL}},
        {"GET", "/api/v1/skus/X/restock", {"POST", NULL, NULL}},
        {"POST", "/healthz", {"GET", NULL, NULL}},
        {"DELETE", "/metrics", {"GET", NULL, NULL}},
    };
    sf_resp r = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sf_http(port, cases[i].method, cases[i].path, NULL, NULL, 0, &r);
        if (r.status != 405)
            sf_fail_at(__FILE__, __LINE__, "wrong method", "%s %s: %s", cases[i].method,
                       cases[i].path, sf_resp_summary(&r));
        SF_ASSERT_ERROR(&r, 405, "method_not_allowed");
        const char *allow = sf_header(&r, "Allow");
        SF_ASSERT(allow != NULL, "%s %s: 405 without Allow", cases[i].method, cases[i].path);
        for (int m = 0; m < 3 && cases[i].must_allow[m] != NULL; m++)
            SF_ASSERT(strstr(allow, cases[i].must_allow[m]) != NULL, "%s %s: Allow: %s lacks %s",
                      cases[i].method, cases[i].path, allow, cases[i].must_allow[m]);
        SF_ASSERT(strstr(allow, cases[i].method) == NULL, "%s %s: Allow: %s names the method",
                  cases[i].method, cases[i].path, allow);
    }
    sf_resp_free(&r);
}

static void test_sold_out(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 3, 1);
    json_decref(order_ok(port, sku, 3));
    sf_resp r = {0};
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 409, "sold_out");
    sf_order(NULL, port, sku, 2, &r);
    SF_ASSERT_ERROR(&r, 409, "sold_out");
    sf_resp_free(&r);
    expect_totals(sku, 3, 0, 3, 1);
}

static void test_insufficient_stock(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 8, 4); /* 2 units in each segment */
    sf_resp r = {0};
    /* 3 <= 8 in all, more than any segment holds: served from two (SPEC §13) */
    json_t *o = order_ok(port, sku, 3);
    SF_ASSERT(json_array_size(json_object_get(o, "parts")) == 2, "%s", "two parts");
    json_decref(o);
    expect_totals(sku, 8, 5, 3, 1);
    sf_order(NULL, port, sku, 6, &r); /* 6 > the 5 left: insufficient, nothing changed */
    SF_ASSERT_ERROR(&r, 409, "insufficient_stock");
    sf_resp_free(&r);
    expect_totals(sku, 8, 5, 3, 1);
    json_decref(order_ok(port, sku, 5)); /* the last units, from every segment left */
    expect_totals(sku, 8, 0, 8, 2);
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 409, "sold_out");
    sf_resp_free(&r);
}

static void test_body_too_large(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 5, 1);

    /* 17 KiB: a valid order padded with an unknown member. */
    size_t big = 17 * 1024;
    char *body = malloc(big + 1);
    assert_non_null(body);
    int n = snprintf(body, big, "{\"sku\": \"%s\", \"pad\": \"", sku);
    memset(body + n, 'p', big - (size_t)n - 2);
    memcpy(body + big - 2, "\"}", 2);
    body[big] = '\0';
    sf_resp r = {0};
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_ERROR(&r, 413, "body_too_large");
    expect_totals(sku, 5, 5, 0, 0);

    /* Exactly 16 KiB is accepted. */
    size_t max = 16 * 1024;
    memcpy(body + max - 2, "\"}", 2);
    body[max] = '\0';
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    free(body);
    sf_resp_free(&r);
    expect_totals(sku, 5, 4, 1, 1);
}

static void test_unsupported_media_type(void **state)
{
    (void)state;
    char sku[64], body[200], path[160];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);
    SF_PUT_SKU(port, TOKEN, sku, 5, 1);
    snprintf(body, sizeof body, "{\"sku\": \"%s\"}", sku);
    size_t len = strlen(body);
    sf_resp r = {0};
    const char *text[] = {"Content-Type: text/plain", NULL};
    sf_http(port, "POST", "/api/v1/orders", text, body, len, &r);
    SF_ASSERT_ERROR(&r, 415, "unsupported_media_type");
    sf_http(port, "POST", "/api/v1/orders", NULL, body, len, &r); /* no Content-Type */
    SF_ASSERT_ERROR(&r, 415, "unsupported_media_type");
    const char *form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
    sf_http(port, "POST", "/api/v1/orders", form, body, len, &r);
    SF_ASSERT_ERROR(&r, 415, "unsupported_media_type");
    char auth[128];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", TOKEN);
    const char *put_text[] = {"Content-Type: text/plain", auth, NULL};
    const char *put_body = "{\"stock\": 99, \"segments\": 3}";
    sf_http(port, "PUT", path, put_text, put_body, strlen(put_body), &r);
    SF_ASSERT_ERROR(&r, 415, "unsupported_media_type");
    expect_totals(sku, 5, 5, 0, 0);

    const char *utf8[] = {"Content-Type: application/json; charset=utf-8", NULL};
    sf_http(port, "POST", "/api/v1/orders", utf8, body, len, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    expect_totals(sku, 5, 4, 1, 1);
}

static void test_admin_auth(void **state)
{
    (void)state;
    char sku[64], path[160], restock[200], opath[256];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);
    snprintf(restock, sizeof restock, "%s/restock", path);
    const char *put_body = "{\"stock\": 10, \"segments\": 2}";
    sf_resp r = {0};

    /* Missing, wrong, truncated, longer and non-Bearer credentials: 401 + WWW-Authenticate. */
    char wrong_prefix[64], longer[64], basic[80];
    snprintf(wrong_prefix, sizeof wrong_prefix, "%.*s", (int)strlen(TOKEN) - 1, TOKEN);
    snprintf(longer, sizeof longer, "%sX", TOKEN);
    const char *bad_tokens[] = {NULL, "wrong", wrong_prefix, longer, ""};
    for (size_t i = 0; i < sizeof bad_tokens / sizeof bad_tokens[0]; i++) {
        sf_json_request(NULL, port, "PUT", path, bad_tokens[i], NULL, put_body, &r);
        SF_ASSERT_ERROR(&r, 401, "unauthorized");
        const char *wa = sf_header(&r, "WWW-Authenticate");
        SF_ASSERT(wa != NULL && strncmp(wa, "Bearer", 6) == 0, "token '%s': WWW-Authenticate %s",
                  bad_tokens[i] ? bad_tokens[i] : "(none)", wa ? wa : "(none)");
    }
    snprintf(basic, sizeof basic, "Authorization: Basic %s", TOKEN);
    const char *basic_h[] = {"Content-Type: application/json", basic, NULL};
    sf_http(port, "PUT", path, basic_h, put_body, strlen(put_body), &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku"); /* the refused PUTs made nothing */

    /* The right token. */
    long long v = SF_PUT_SKU(port, TOKEN, sku, 10, 2);
    json_t *o = order_ok(port, sku, 1); /* orders need no token */
    snprintf(opath, sizeof opath, "/api/v1/orders/%s",
             json_string_value(json_object_get(o, "order_id")));
    json_decref(o);

    /* Every admin endpoint refuses without it and changes nothing. */
    sf_json_request(NULL, port, "PUT", path, "wrong", NULL, "{\"stock\": 1, \"segments\": 1}", &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    sf_json_request(NULL, port, "POST", restock, NULL, NULL, "{\"quantity\": 5}", &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    sf_json_request(NULL, port, "DELETE", opath, "wrong", NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.version, v);
    expect_totals(sku, 10, 9, 1, 1);

    /* ... and works with it. */
    sf_json_request(NULL, port, "POST", restock, TOKEN, NULL, "{\"quantity\": 5}", &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_json_request(NULL, port, "DELETE", opath, TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    expect_totals(sku, 15, 15, 0, 0);
    sf_json_request(NULL, port, "DELETE", path, TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);
}

static void test_probes(void **state)
{
    (void)state;
    sf_resp r = {0};
    sf_http(port, "GET", "/healthz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(json_is_object(r.json) && json_object_size(r.json) == 1 &&
                  strcmp(sf_str(r.json, "status"), "ok") == 0,
              "%s", r.body);
    sf_http(port, "GET", "/readyz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "ready") == 0, "%s", r.body);
    sf_http(port, "HEAD", "/healthz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(r.body_len == 0, "HEAD with a body");

    double before = sf_metric(port, "inventory_orders_total{result=\"unknown_sku\"}");
    SF_ASSERT(before >= 0, "no inventory_orders_total{result=\"unknown_sku\"} series");
    sf_order(NULL, port, "never-put-metrics-sku", 1, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_http(port, "GET", "/metrics", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    const char *ct = sf_header(&r, "Content-Type");
    SF_ASSERT(ct != NULL && strncmp(ct, "text/plain", 10) == 0 && strstr(ct, "0.0.4") != NULL,
              "Content-Type %s", ct ? ct : "(none)");
    SF_ASSERT(strstr(r.body, "# TYPE inventory_orders_total counter") != NULL &&
                  strstr(r.body, "\ninventory_orders_total{") != NULL,
              "metrics lack inventory_orders_total: %.500s", r.body);
    sf_resp_free(&r);
    double after = sf_metric(port, "inventory_orders_total{result=\"unknown_sku\"}");
    SF_ASSERT(after == before + 1, "unknown_sku counter went from %g to %g", before, after);
}

/* ---- Idempotency-Key ---- */

static void test_idempotency_replay(void **state)
{
    (void)state;
    char sku[64], body[200], key[80];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 10, 2);
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"quantity\": 2}", sku);
    tu_unique_name(key, sizeof key, "key");
    double replayed0 = sf_metric(port, "inventory_orders_total{result=\"replayed\"}");

    sf_resp first = {0}, again = {0};
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &first);
    SF_ASSERT_STATUS(&first, 201);
    for (int i = 0; i < 3; i++) {
        sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &again);
        SF_ASSERT_STATUS(&again, 200);
        SF_ASSERT(json_equal(again.json, first.json), "replay %s, first %s", again.body,
                  first.body);
    }
    expect_totals(sku, 10, 8, 2, 1);
    double replayed1 = sf_metric(port, "inventory_orders_total{result=\"replayed\"}");
    SF_ASSERT(replayed1 == replayed0 + 3, "replayed counter %g -> %g", replayed0, replayed1);

    /* Another key is another order. */
    char key2[80];
    tu_unique_name(key2, sizeof key2, "key");
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key2, body, &again);
    SF_ASSERT_STATUS(&again, 201);
    SF_ASSERT(!json_equal(json_object_get(again.json, "order_id"),
                          json_object_get(first.json, "order_id")),
              "two keys, one order id %s", again.body);
    sf_resp_free(&first);
    sf_resp_free(&again);
    expect_totals(sku, 10, 6, 4, 2);
}

/*
 * A key used before a re-PUT, used again after it: the PUT replaced the SKU's order records, so
 * the key's order is gone. POST /api/v1/orders may answer only what SPEC §5 lists for it; the
 * natural answer is a new order of the new version (201).
 */
static void test_idempotency_key_after_reput(void **state)
{
    (void)state;
    char sku[64], body[200], key[80];
    new_sku(sku, sizeof sku);
    tu_unique_name(key, sizeof key, "key-reput");
    SF_PUT_SKU(port, TOKEN, sku, 10, 2);
    snprintf(body, sizeof body, "{\"sku\": \"%s\"}", sku);
    sf_resp r = {0};
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_PUT_SKU(port, TOKEN, sku, 10, 2);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &r);
    SF_ASSERT(r.status == 201,
              "the same Idempotency-Key after a re-PUT: %s (expected a new order "
              "under the new version; unknown_order is not an answer of "
              "POST /api/v1/orders)",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    expect_totals(sku, 10, 9, 1, 1);
}

#define IDEM_THREADS 8

struct idem_worker {
    const char *sku, *key;
    pthread_barrier_t *go;
    int status;
    char order_id[128];
    char summary[300];
    pthread_t tid;
};

static void *idem_run(void *arg)
{
    struct idem_worker *w = arg;
    char body[200];
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"quantity\": 3}", w->sku);
    sf_conn *c = sf_conn_open(port, 15000);
    sf_resp r = {0};
    /* Connect first so that the requests themselves leave together. */
    sf_conn_request(c, "GET", "/healthz", NULL, NULL, 0, &r);
    pthread_barrier_wait(w->go);
    w->status = sf_json_request(c, port, "POST", "/api/v1/orders", NULL, w->key, body, &r);
    const char *id = json_string_value(json_object_get(r.json, "order_id"));
    snprintf(w->order_id, sizeof w->order_id, "%s", id ? id : "");
    snprintf(w->summary, sizeof w->summary, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    sf_conn_close(c);
    return NULL;
}

static void test_idempotency_concurrent(void **state)
{
    (void)state;
    char sku[64], key[80], body[200];
    new_sku(sku, sizeof sku);
    tu_unique_name(key, sizeof key, "concurrent-key");
    SF_PUT_SKU(port, TOKEN, sku, 20, 4);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, IDEM_THREADS);
    struct idem_worker w[IDEM_THREADS];
    for (int i = 0; i < IDEM_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].sku = sku;
        w[i].key = key;
        w[i].go = &go;
        assert_int_equal(pthread_create(&w[i].tid, NULL, idem_run, &w[i]), 0);
    }
    for (int i = 0; i < IDEM_THREADS; i++)
        pthread_join(w[i].tid, NULL);
    pthread_barrier_destroy(&go);

    int created = 0, replayed = 0, busy = 0;
    const char *id = NULL;
    for (int i = 0; i < IDEM_THREADS; i++) {
        if (w[i].status == 201) {
            created++;
            id = w[i].order_id;
        } else if (w[i].status == 200) {
            replayed++;
        } else if (w[i].status == 503) {
            busy++;
        } else {
            sf_fail_at(__FILE__, __LINE__, "concurrent key", "request %d: %s", i, w[i].summary);
        }
    }
    SF_ASSERT(created == 1, "%d requests created an order (200: %d, 503: %d)", created, replayed,
              busy);
    for (int i = 0; i < IDEM_THREADS; i++)
        SF_ASSERT(w[i].status == 503 || strcmp(w[i].order_id, id) == 0,
                  "request %d got order %s, the created one is %s", i, w[i].order_id, id);
    /* A later replay settles any request that found the first one still in progress. */
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"quantity\": 3}", sku);
    sf_resp r = {0};
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "order_id"), id) == 0, "%s", r.body);
    sf_resp_free(&r);
    expect_totals(sku, 20, 17, 3, 1);
}

/* ---- 503 lock_timeout ---- */

struct slow_order {
    int port;
    const char *sku;
    int status;
    char summary[300];
    pthread_t tid;
};

static void *slow_order_run(void *arg)
{
    struct slow_order *s = arg;
    sf_resp r = {0};
    s->status = sf_order(NULL, s->port, s->sku, 1, &r);
    snprintf(s->summary, sizeof s->summary, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    return NULL;
}

static void test_lock_timeout(void **state)
{
    (void)state;
    /* Without --admin-token, admin calls from loopback are accepted (the fixture passes
     * --admin-allow-loopback). */
    const char *args[] = {"--hold-ms", "800", "--lock-wait-ms", "150", "--threads", "4", NULL};
    sf_service *slow = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(slow != NULL, "could not start inventoryd %s", "--hold-ms 800");
    int sp = sf_port(slow);
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(sp, NULL, sku, 10, 1);

    struct slow_order holder = {.port = sp, .sku = sku};
    assert_int_equal(pthread_create(&holder.tid, NULL, slow_order_run, &holder), 0);
    tu_sleep_ms(200); /* the holder is inside its 800 ms critical section now */
    sf_resp r = {0};
    sf_order(NULL, sp, sku, 1, &r);
    pthread_join(holder.tid, NULL);
    SF_ASSERT_ERROR(&r, 503, "lock_timeout");
    const char *ra = sf_header(&r, "Retry-After");
    SF_ASSERT(ra != NULL && atoi(ra) >= 1, "Retry-After %s", ra ? ra : "(none)");
    SF_ASSERT(r.elapsed_us >= 140 * 1000 && r.elapsed_us < 600 * 1000,
              "lock_timeout after %lld us, --lock-wait-ms 150", (long long)r.elapsed_us);
    SF_ASSERT(holder.status == 201, "the holder's order: %s", holder.summary);
    sf_resp_free(&r);
    expect_totals(sku, 10, 9, 1, 1);
    SF_ASSERT_EQ(sf_stop(slow), 0);
}

/* ---- the checker itself ---- */

/* The invariant checker must be able to fail: each kind of drift a buggy script could leave
 * behind is made by hand on a scratch SKU and must be reported. */
static void test_checker_catches_drift(void **state)
{
    (void)state;
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(port, TOKEN, sku, 12, 3);
    json_t *o = order_ok(port, sku, 2);
    long long k = sf_json_int(o, "segment", -1);
    const char *id = json_string_value(json_object_get(o, "order_id"));
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);

    struct {
        const char *what, *doit, *undo;
    } drifts[] = {
        {"stock taken without an order", "DECRBY inv:2:{%s/%lld}:stock 1",
         "INCRBY inv:2:{%s/%lld}:stock 1"},
        {"an order counter without its units", "HINCRBY inv:2:{%s/%lld}:cnt o 1",
         "HINCRBY inv:2:{%s/%lld}:cnt o -1"},
        {"sold units without stock moving", "HINCRBY inv:2:{%s/%lld}:cnt s 1",
         "HINCRBY inv:2:{%s/%lld}:cnt s -1"},
        {"a segment below zero", "SET inv:2:{%s/%lld}:stock -1", NULL},
    };
    for (size_t i = 0; i < sizeof drifts / sizeof drifts[0]; i++) {
        redisReply *before = rf_command(gf_redis, "GET inv:2:{%s/%lld}:stock", sku, k);
        char saved[32];
        snprintf(saved, sizeof saved, "%s", before && before->str ? before->str : "0");
        freeReplyObject(before);
        freeReplyObject(rf_command(gf_redis, drifts[i].doit, sku, k));
        SF_ASSERT(sf_check_invariants(rf_url(gf_redis), sku, &rep) == 0 && !rep.ok,
                  "the checker missed: %s", drifts[i].what);
        if (drifts[i].undo != NULL)
            freeReplyObject(rf_command(gf_redis, drifts[i].undo, sku, k));
        else
            freeReplyObject(rf_command(gf_redis, "SET inv:2:{%s/%lld}:stock %s", sku, k, saved));
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    }
    /* An order record that is not where its id says, and one that lost its units. */
    long long other = (k + 1) % 3;
    redisReply *rec = rf_command(gf_redis, "HGET inv:2:{%s/%lld}:orders %s", sku, k, id);
    SF_ASSERT(rec != NULL && rec->type == REDIS_REPLY_STRING, "no record of order %s", id);
    freeReplyObject(
        rf_command(gf_redis, "HSET inv:2:{%s/%lld}:orders %s %s", sku, other, id, rec->str));
    SF_ASSERT(sf_check_invariants(rf_url(gf_redis), sku, &rep) == 0 && !rep.ok, "%s",
              "the checker missed an order record in the wrong segment");
    freeReplyObject(rf_command(gf_redis, "HDEL inv:2:{%s/%lld}:orders %s", sku, other, id));
    freeReplyObject(rf_command(gf_redis, "HDEL inv:2:{%s/%lld}:orders %s", sku, k, id));
    SF_ASSERT(sf_check_invariants(rf_url(gf_redis), sku, &rep) == 0 && !rep.ok, "%s",
              "the checker missed counters of an order whose record is gone");
    freeReplyObject(
        rf_command(gf_redis, "HSET inv:2:{%s/%lld}:orders %s %s", sku, k, id, rec->str));
    freeReplyObject(rec);
    /* A segment left over from a larger layout. */
    freeReplyObject(rf_command(gf_redis, "SET inv:2:{%s/7}:stock 5", sku));
    SF_ASSERT(sf_check_invariants(rf_url(gf_redis), sku, &rep) == 0 && !rep.ok, "%s",
              "the checker missed a stray segment");
    freeReplyObject(rf_command(gf_redis, "DEL inv:2:{%s/7}:stock", sku));
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.sold == 2 && rep.orders == 1 && rep.remaining == 10, "sold %lld orders %lld",
              rep.sold, rep.orders);
    json_decref(o);
}

/* ---- the process ---- */

static void test_config_errors_exit_2(void **state)
{
    (void)state;
    struct {
        const char *flag, *value, *key;
    } bad[] = {
        {"--port", "abc", "port"},
        {"--strategy", "fastest", "strategy"},
        {"--threads", "0", "threads"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[1024], err[4096];
        const char *args[] = {bad[i].flag, bad[i].value, NULL};
        int st = sf_run(args, 5000, out, sizeof out, err, sizeof err);
        SF_ASSERT(st == 2, "%s %s: exit status %d, stderr: %s", bad[i].flag, bad[i].value, st, err);
        SF_ASSERT(strstr(err, bad[i].key) != NULL, "%s %s: stderr does not name %s: %s",
                  bad[i].flag, bad[i].value, bad[i].key, err);
    }
}

static void test_sigterm_drains_and_exits_0(void **state)
{
    (void)state;
    const char *args[] = {"--hold-ms", "400", "--threads", "2", NULL};
    sf_service *s = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(s != NULL, "could not start inventoryd %s", "--hold-ms 400");
    char sku[64];
    new_sku(sku, sizeof sku);
    SF_PUT_SKU(sf_port(s), NULL, sku, 5, 1);
    struct slow_order inflight = {.port = sf_port(s), .sku = sku};
    assert_int_equal(pthread_create(&inflight.tid, NULL, slow_order_run, &inflight), 0);
    tu_sleep_ms(150);
    SF_ASSERT(sf_kill(s, SIGTERM) == 0, "%s", "SIGTERM");
    pthread_join(inflight.tid, NULL);
    /* The order in flight when SIGTERM came was finished, not dropped. */
    SF_ASSERT(inflight.status == 201, "in-flight order at SIGTERM: %s", inflight.summary);
    int64_t deadline = tu_now_ms() + 5000;
    while (sf_alive(s) && tu_now_ms() < deadline)
        tu_sleep_ms(10);
    int status = sf_exit_status(s);
    SF_ASSERT(status == 0, "exit status after SIGTERM: %d", status);
    sf_stop(s);
    expect_totals(sku, 5, 4, 1, 1);
}

/* ---- Redis going away ---- */

static void test_redis_down_503_and_recovery(void **state)
{
    (void)state;
    /* A Redis of its own, persistent, so its data survives the restart. */
    const char *rargs[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    rf_server *r2 = rf_start(rargs);
    SF_ASSERT(r2 != NULL, "%s", "could not start redis-server");
    const char *args[] = {"--threads", "4", "--redis-timeout-ms", "500", NULL};
    sf_service *s = sf_start(rf_url(r2), args);
    SF_ASSERT(s != NULL, "%s", "could not start inventoryd");
    int sp = sf_port(s);
    char sku[64], path[160];
    new_sku(sku, sizeof sku);
    sku_path(path, sizeof path, sku);
    SF_PUT_SKU(sp, NULL, sku, 20, 4);
    json_decref(order_ok(sp, sku, 2));

    SF_ASSERT(rf_halt(r2, SIGKILL) == 0, "%s", "kill redis");
    sf_resp r = {0};
    sf_order(NULL, sp, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    const char *ra = sf_header(&r, "Retry-After");
    SF_ASSERT(ra != NULL && atoi(ra) >= 1, "Retry-After %s", ra ? ra : "(none)");
    SF_ASSERT(r.elapsed_us < 3000 * 1000, "503 took %lld us", (long long)r.elapsed_us);
    sf_http(sp, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    sf_http(sp, "GET", "/readyz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 503);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "unavailable") == 0 &&
                  json_is_string(json_object_get(r.json, "reason")),
              "%s", r.body);
    sf_http(sp, "GET", "/healthz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200); /* the process itself is fine */

    SF_ASSERT(rf_restart(r2) == 0, "%s", "restart redis");
    int64_t t0 = tu_now_ms(), ready_ms = -1;
    while (tu_now_ms() - t0 < 5000) {
        if (sf_http(sp, "GET", "/readyz", NULL, NULL, 0, &r) == 200) {
            ready_ms = tu_now_ms() - t0;
            break;
        }
        tu_sleep_ms(50);
    }
    SF_ASSERT(ready_ms >= 0, "/readyz not 200 within 5 s of the Redis restart: %s",
              sf_resp_summary(&r));
    /* Orders work again (the first may still meet a pooled connection that died). */
    int got = 0, unavailable = 0;
    for (int i = 0; i < 5 && got != 201; i++) {
        got = sf_order(NULL, sp, sku, 1, &r);
        if (got == 503)
            unavailable++;
        else
            SF_ASSERT_STATUS(&r, 201);
    }
    SF_ASSERT(got == 201, "no order after the Redis restart: %s", sf_resp_summary(&r));
    if (unavailable > 0)
        fprintf(stderr, "note: %d order(s) answered 503 after /readyz was 200 again\n",
                unavailable);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(r2), sku, &rep);
    SF_ASSERT(rep.stock_total == 20 && rep.sold == 3 && rep.orders == 2,
              "after the restart: stock_total %lld sold %lld orders %lld", rep.stock_total,
              rep.sold, rep.orders);
    SF_ASSERT_EQ(sf_stop(s), 0);
    rf_stop(r2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_created_then_replaced),
        cmocka_unit_test(test_status_fields),
        cmocka_unit_test(test_unknown_sku),
        cmocka_unit_test(test_restock),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_order_fields),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_invalid_requests_change_nothing),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_method_not_allowed),
        cmocka_unit_test(test_sold_out),
        cmocka_unit_test(test_insufficient_stock),
        cmocka_unit_test(test_body_too_large),
        cmocka_unit_test(test_unsupported_media_type),
        cmocka_unit_test(test_admin_auth),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_idempotency_replay),
        cmocka_unit_test(test_idempotency_concurrent),
        cmocka_unit_test(test_idempotency_key_after_reput),
        cmocka_unit_test(test_lock_timeout),
        cmocka_unit_test(test_checker_catches_drift),
        cmocka_unit_test(test_config_errors_exit_2),
        cmocka_unit_test(test_sigterm_drains_and_exits_0),
        cmocka_unit_test(test_redis_down_503_and_recovery),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
