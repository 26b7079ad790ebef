/*
 * Carts (SPEC §17, issue 33; docs/design.md "Carts (SPEC §17)") against a real redis-server and
 * real inventoryd processes over HTTP (about 25 s):
 *   - carts of 2 to 5 SKUs succeed whole: 201 with items (home first, each with its parts), the
 *     primary in the home SKU, a part record (part_of the cart, its own sku) for every other
 *     part, and per SKU sold = total - remaining;
 *   - one item short or sold out: nothing sold in any SKU, the answer names the SKU; an unknown
 *     SKU likewise; the bad bodies (duplicate_sku, items with sku, 0 or 11 items) change nothing;
 *   - an item that needs several segments;
 *   - an Idempotency-Key replays the whole cart (200, the same body); GET of the cart answers
 *     its record with items, of a part's id 404;
 *   - a per-user limit in an item's SKU (not the home one) counts the cart and refuses past it;
 *   - a hold cart: the shortest TTL, every part reserved (r), the primary's expires_at;
 *   - one --order-redis-call-budget for the cart: over it, 503 and nothing sold;
 *   - an item planned without reading its segments first (a probe): its stock only in a segment
 *     the instance cached empty (another instance cancelled an order there) and needing two
 *     segments: 201 from both; a SKU one unit short, never seen: insufficient_stock (~1 s);
 *   - contention: 12 clients on 3 instances, 2-3 item carts over 5 SKUs in random orders until
 *     the stock is gone: every request answered within the lock wait (no deadlock), then 0
 *     partial carts and every SKU whole;
 *   - an instance killed -9 at each step of a cart (cart_intent, cart_parts, cart_primary): no
 *     201 was sent, the intent stays in inv:2:{home}:cart for the healer with exactly the state
 *     of its step (no part / every part but the primary / the whole cart). The heal itself (the
 *     sweeper's, helper cartend's) is not asserted here yet: it lands with the healer.
 * On a 3-master Redis Cluster (it_cart_cluster, IT_CART_PART=cluster, ~10 s, the cluster's
 * start): carts whose SKUs sit on different masters, one with an item of several segments, a
 * limit and a hold item under a home SKU without a TTL (the home meta's hold flag set), a
 * refused cart selling nothing.
 */
#include "svc_test.h"

#include "cluster_fixture.h"
#include "rules.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define CT_TOKEN "cart-admin-token"
#define CT_INSTANCES 3

static sf_service *svc[CT_INSTANCES];

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {
        "--threads",          "2",   "--admin-token",   CT_TOKEN, "--trust-body-user-id",
        "--redis-timeout-ms", "500", "--lock-lease-ms", "1000",   NULL};
    for (int i = 0; i < CT_INSTANCES; i++)
        if (!(svc[i] = sf_group_service(args)))
            return -1;
    return 0;
}

static int ct_port(int i)
{
    return sf_port(svc[i % CT_INSTANCES]);
}

/* PUT sku with stock, segments and the rules (",..." or ""). */
static void ct_put(const char *sku, long long stock, int segments, const char *rules)
{
    char path[160], body[512];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld,\"segments\":%d%s}", stock, segments, rules);
    sf_resp r = {0};
    sf_json_request(NULL, ct_port(0), "PUT", path, CT_TOKEN, NULL, body, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* POSTs {"items":[items],"user_id":user} (user NULL: none) to port p. The status. */
static int ct_cart(int p, const char *items, const char *user, const char *idem, sf_resp *r)
{
    char body[2048];
    if (user)
        snprintf(body, sizeof body, "{\"items\":[%s],\"user_id\":\"%s\"}", items, user);
    else
        snprintf(body, sizeof body, "{\"items\":[%s]}", items);
    return sf_json_request(NULL, p, "POST", "/api/v1/orders", NULL, idem, body, r);
}

/* The segments' stock of sku summed (nseg segments). */
static long long ct_remaining(const char *sku, int nseg)
{
    long long sum = 0;
    for (int k = 0; k < nseg; k++) {
        long long v = sf_seg_stock(sku, k);
        SF_ASSERT(v != RF_NOT_INTEGER, "stock of %s/%d", sku, k);
        sum += v;
    }
    return sum;
}

/* The units of a record in its segment k: its parts' entry for k, else its quantity. */
static long long ct_units(json_t *o, int k)
{
    json_t *parts = json_object_get(o, "parts");
    if (json_is_array(parts)) {
        size_t i;
        json_t *p;
        json_array_foreach(parts, i, p)
        {
            if (sf_json_int(p, "segment", -1) == k)
                return sf_json_int(p, "quantity", 0);
        }
        return 0;
    }
    return sf_json_int(o, "quantity", 0);
}

/* Whether the record id exists in segment k of sku. */
static int ct_exists(const char *sku, int k, const char *id)
{
    return rf_integer(gf_redis, "HEXISTS inv:2:{%s/%d}:orders %s", sku, k, id) == 1;
}

/* Splits "<32 hex>-<k>-<sku>": 0, or -1 when it is not an order id. */
static int ct_split(const char *id, char *hex, int *k, char *sku)
{
    const char *a = strchr(id, '-');
    if (!a || a - id != 32)
        return -1;
    const char *b = strchr(a + 1, '-');
    if (!b)
        return -1;
    memcpy(hex, id, 32);
    hex[32] = '\0';
    *k = atoi(a + 1);
    snprintf(sku, 80, "%s", b + 1);
    return 0;
}

/* SPEC §8 for carts, over skus (each of nseg segments, stock total[i]): sold = total -
 * remaining from the live records' units; every part's part_of names a primary that exists
 * and lists it among its items; every primary's items' parts exist. Returns the live carts. */
static int ct_whole(const char *const *skus, const long long *total, int n, int nseg)
{
    int primaries = 0;
    for (int s = 0; s < n; s++) {
        long long sold = 0;
        for (int k = 0; k < nseg; k++) {
            redisReply *rep = rf_command(gf_redis, "HGETALL inv:2:{%s/%d}:orders", skus[s], k);
            SF_ASSERT(rep && rep->type == REDIS_REPLY_ARRAY, "HGETALL %s/%d", skus[s], k);
            for (size_t i = 0; i + 1 < rep->elements; i += 2) {
                const char *id = rep->element[i]->str;
                json_t *o = json_loads(rep->element[i + 1]->str, 0, NULL);
                SF_ASSERT(o != NULL, "record %s", id);
                const char *st = json_string_value(json_object_get(o, "status"));
                int live = st && strcmp(st, "cancelled") != 0 && strcmp(st, "expired") != 0;
                if (live)
                    sold += ct_units(o, k);
                const char *of = json_string_value(json_object_get(o, "part_of"));
                char hex[33], psku[80];
                int pk;
                if (of) {
                    SF_ASSERT(ct_split(of, hex, &pk, psku) == 0, "part_of %s", of);
                    SF_ASSERT(strncmp(hex, id, 32) == 0, "part %s of %s: another hex", id, of);
                    SF_ASSERT(ct_exists(psku, pk, of), "a partial cart: part %s, no primary %s", id,
                              of);
                    SF_ASSERT(strcmp(json_string_value(json_object_get(o, "sku")), skus[s]) == 0,
                              "part %s: sku %s", id, json_string_value(json_object_get(o, "sku")));
                }
                json_t *items = json_object_get(o, "items");
                if (json_is_array(items)) {
                    primaries++;
                    size_t a, b;
                    json_t *it, *p;
                    json_array_foreach(items, a, it)
                    {
                        const char *isku = json_string_value(json_object_get(it, "sku"));
                        json_array_foreach(json_object_get(it, "parts"), b, p)
                        {
                            char pid[160];
                            int kk = (int)sf_json_int(p, "segment", -1);
                            snprintf(pid, sizeof pid, "%.32s-%d-%s", id, kk, isku);
                            SF_ASSERT(ct_exists(isku, kk, pid), "a partial cart: %s has no part %s",
                                      id, pid);
                        }
                    }
                }
                json_decref(o);
            }
            freeReplyObject(rep);
        }
        long long left = ct_remaining(skus[s], nseg);
        SF_ASSERT(sold == total[s] - left, "%s: sold %lld, total %lld, remaining %lld", skus[s],
                  sold, total[s], left);
    }
    return primaries;
}

/* The number of carts being made (intents) with home sku. */
static long long ct_intents(const char *sku)
{
    return rf_integer(gf_redis, "HLEN inv:2:{%s}:cart", sku);
}

/* ---- whole carts ---- */

static void test_carts_of_two_to_five(void **state)
{
    (void)state;
    const char *skus[5] = {"ct-a", "ct-b", "ct-c", "ct-d", "ct-e"};
    long long total[5];
    for (int i = 0; i < 5; i++)
        ct_put(skus[i], total[i] = 40, 4, "");
    for (int n = 2; n <= 5; n++) {
        char items[1024] = "";
        size_t used = 0;
        for (int i = 0; i < n; i++) /* home: the last SKU, so the lock order is not the items' */
            used += (size_t)snprintf(items + used, sizeof items - used,
                                     "%s{\"sku\":\"%s\",\"quantity\":%d}", i ? "," : "",
                                     skus[(n - 1 + i) % n], i + 1);
        sf_resp r = {0};
        SF_ASSERT(ct_cart(ct_port(n), items, "u-whole", NULL, &r) == 201, "%d items: %s", n,
                  sf_resp_summary(&r));
        json_t *its = json_object_get(r.json, "items");
        SF_ASSERT(json_is_array(its) && (int)json_array_size(its) == n, "items: %s",
                  sf_resp_summary(&r));
        const char *id = json_string_value(json_object_get(r.json, "order_id"));
        char hex[33], home[80];
        int k1;
        SF_ASSERT(id && ct_split(id, hex, &k1, home) == 0, "order_id: %s", sf_resp_summary(&r));
        SF_ASSERT(strcmp(home, skus[(n - 1) % n]) == 0, "the home SKU is items[0]'s: %s", id);
        SF_ASSERT_EQ(sf_json_int(r.json, "quantity", -1), 1);
        for (int i = 0; i < n; i++) {
            json_t *it = json_array_get(its, (size_t)i);
            SF_ASSERT(
                strcmp(json_string_value(json_object_get(it, "sku")), skus[(n - 1 + i) % n]) == 0,
                "items[%d]: %s", i, sf_resp_summary(&r));
            SF_ASSERT_EQ(sf_json_int(it, "quantity", -1), i + 1);
        }
        sf_resp_free(&r);
        SF_ASSERT_EQ(ct_intents(home), 0);
    }
    SF_ASSERT_EQ(ct_whole(skus, total, 5, 4), 4);
}

static void test_refusals_sell_nothing(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-r1", "ct-r2", "ct-r3"};
    long long total[3] = {10, 10, 0};
    ct_put(skus[0], 10, 2, "");
    ct_put(skus[1], 10, 2, "");
    ct_put(skus[2], 0, 2, "");
    struct {
        const char *items;
        int status;
        const char *error, *sku;
    } cases[] = {
        {"{\"sku\":\"ct-r1\",\"quantity\":2},{\"sku\":\"ct-r3\"}", 409, "sold_out", "ct-r3"},
        {"{\"sku\":\"ct-r1\",\"quantity\":2},{\"sku\":\"ct-r2\",\"quantity\":11}", 409,
         "insufficient_stock", "ct-r2"},
        {"{\"sku\":\"ct-r2\"},{\"sku\":\"ct-nope\"}", 404, "unknown_sku", "ct-nope"},
        {"{\"sku\":\"ct-r1\"},{\"sku\":\"ct-r1\"}", 422, "duplicate_sku", NULL},
        {"{\"sku\":\"ct-r1\",\"quantity\":0}", 400, "invalid_request", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sf_resp r = {0};
        int st = ct_cart(ct_port((int)i), cases[i].items, NULL, NULL, &r);
        SF_ASSERT(st == cases[i].status && strcmp(sf_error_code(&r), cases[i].error) == 0, "%s: %s",
                  cases[i].items, sf_resp_summary(&r));
        const char *sku = json_string_value(json_object_get(r.json, "sku"));
        if (cases[i].sku)
            SF_ASSERT(sku && strcmp(sku, cases[i].sku) == 0, "no sku %s: %s", cases[i].sku,
                      sf_resp_summary(&r));
        sf_resp_free(&r);
    }
    /* sku and items together; 11 items */
    sf_resp r = {0};
    int st = sf_json_request(NULL, ct_port(0), "POST", "/api/v1/orders", NULL, NULL,
                             "{\"sku\":\"ct-r1\",\"items\":[{\"sku\":\"ct-r2\"}]}", &r);
    SF_ASSERT(st == 422 && strcmp(sf_error_code(&r), "items_and_sku") == 0, "%s",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    char items[1024] = "";
    size_t used = 0;
    for (int i = 0; i < 11; i++)
        used += (size_t)snprintf(items + used, sizeof items - used, "%s{\"sku\":\"ct-x%d\"}",
                                 i ? "," : "", i);
    SF_ASSERT_EQ(ct_cart(ct_port(1), items, NULL, NULL, &r), 400);
    sf_resp_free(&r);
    SF_ASSERT_EQ(ct_remaining("ct-r1", 2), 10);
    SF_ASSERT_EQ(ct_remaining("ct-r2", 2), 10);
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 2), 0);
    SF_ASSERT_EQ(ct_intents("ct-r1") + ct_intents("ct-r2"), 0);
}

static void test_multi_segment_item_replay_get(void **state)
{
    (void)state;
    const char *skus[2] = {"ct-m1", "ct-m2"};
    long long total[2] = {40, 40};
    ct_put(skus[0], 40, 4, "");
    ct_put(skus[1], 40, 4, ""); /* 10 a segment: 25 units take three parts */
    const char *items = "{\"sku\":\"ct-m1\",\"quantity\":3},{\"sku\":\"ct-m2\",\"quantity\":25}";
    sf_resp r = {0}, again = {0}, get = {0};
    double created = sf_metric(ct_port(0), "inventory_orders_total{result=\"created\"}");
    SF_ASSERT(ct_cart(ct_port(0), items, NULL, "ct-key-1", &r) == 201, "%s", sf_resp_summary(&r));
    /* one cart, one order counted (not one per item) */
    SF_ASSERT(sf_metric(ct_port(0), "inventory_orders_total{result=\"created\"}") == created + 1,
              "%s", "inventory_orders_total{result=\"created\"} counted the cart's items");
    json_t *m2 = json_array_get(json_object_get(r.json, "items"), 1);
    SF_ASSERT(json_array_size(json_object_get(m2, "parts")) >= 3, "%s", sf_resp_summary(&r));
    /* the same key on another instance: the stored cart */
    SF_ASSERT(ct_cart(ct_port(1), items, NULL, "ct-key-1", &again) == 200, "%s",
              sf_resp_summary(&again));
    SF_ASSERT(json_equal(json_object_get(r.json, "items"), json_object_get(again.json, "items")) &&
                  json_equal(json_object_get(r.json, "order_id"),
                             json_object_get(again.json, "order_id")),
              "replay %s vs %s", sf_resp_summary(&again), sf_resp_summary(&r));
    const char *id = json_string_value(json_object_get(r.json, "order_id"));
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%s", id);
    SF_ASSERT(sf_http(ct_port(2), "GET", path, NULL, NULL, 0, &get) == 200, "%s",
              sf_resp_summary(&get));
    SF_ASSERT(json_equal(json_object_get(get.json, "items"), json_object_get(r.json, "items")),
              "GET %s", sf_resp_summary(&get));
    sf_resp_free(&get);
    /* a part's id is no order */
    int k = (int)sf_json_int(json_array_get(json_object_get(m2, "parts"), 0), "segment", -1);
    snprintf(path, sizeof path, "/api/v1/orders/%.32s-%d-ct-m2", id, k);
    SF_ASSERT(sf_http(ct_port(2), "GET", path, NULL, NULL, 0, &get) == 404, "%s",
              sf_resp_summary(&get));
    sf_resp_free(&get);
    sf_resp_free(&r);
    sf_resp_free(&again);
    SF_ASSERT_EQ(ct_remaining("ct-m1", 4), 37);
    SF_ASSERT_EQ(ct_remaining("ct-m2", 4), 15);
    SF_ASSERT_EQ(ct_whole(skus, total, 2, 4), 1);
}

static void test_limit_in_another_item(void **state)
{
    (void)state;
    const char *skus[2] = {"ct-l1", "ct-l2"};
    long long total[2] = {20, 20};
    ct_put(skus[0], 20, 2, "");
    ct_put(skus[1], 20, 2, ",\"limit_per_user\":2");
    const char *items = "{\"sku\":\"ct-l1\"},{\"sku\":\"ct-l2\",\"quantity\":2}";
    sf_resp r = {0};
    SF_ASSERT(ct_cart(ct_port(0), items, "u-lim", NULL, &r) == 201, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    SF_ASSERT(ct_cart(ct_port(1), "{\"sku\":\"ct-l1\"},{\"sku\":\"ct-l2\"}", "u-lim", NULL, &r) ==
                      409 &&
                  strcmp(sf_error_code(&r), "limit_exceeded") == 0,
              "%s", sf_resp_summary(&r));
    const char *sku = json_string_value(json_object_get(r.json, "sku"));
    SF_ASSERT(sku && strcmp(sku, "ct-l2") == 0, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* no verified user: the SKU with a limit refuses */
    SF_ASSERT(ct_cart(ct_port(2), items, NULL, NULL, &r) == 401, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    SF_ASSERT_EQ(ct_remaining("ct-l1", 2), 19);
    SF_ASSERT_EQ(ct_remaining("ct-l2", 2), 18);
    SF_ASSERT_EQ(ct_whole(skus, total, 2, 2), 1);
}

static void test_hold_cart(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-h0", "ct-h1", "ct-h2"};
    long long total[3] = {20, 20, 20};
    ct_put(skus[0], 20, 2, "");                           /* no hold: the home SKU */
    ct_put(skus[1], 20, 2, ",\"reservation_ttl_s\":300"); /* ... */
    ct_put(skus[2], 20, 2, ",\"reservation_ttl_s\":60");  /* the shortest */
    sf_resp r = {0};
    SF_ASSERT(ct_cart(ct_port(0),
                      "{\"sku\":\"ct-h0\"},{\"sku\":\"ct-h1\",\"quantity\":2},{\"sku\":\"ct-h2\"}",
                      NULL, NULL, &r) == 201,
              "%s", sf_resp_summary(&r));
    SF_ASSERT(strcmp(json_string_value(json_object_get(r.json, "status")), "reserved") == 0, "%s",
              sf_resp_summary(&r));
    const char *exp = json_string_value(json_object_get(r.json, "expires_at"));
    const char *cr = json_string_value(json_object_get(r.json, "created_at"));
    SF_ASSERT(exp && cr, "%s", sf_resp_summary(&r));
    int64_t e = 0, c = 0;
    SF_ASSERT(rules_parse_time(exp, strlen(exp), &e) == 0 &&
                  rules_parse_time(cr, strlen(cr), &c) == 0,
              "%s", sf_resp_summary(&r));
    SF_ASSERT(e - c > 55000 && e - c < 65000, "expires %lld ms after its creation, not 60 s",
              (long long)(e - c));
    sf_resp_free(&r);
    /* every part reserved: r counts its units in its segment */
    long long reserved = 0;
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2; k++) {
            char buf[32] = "0";
            (void)rf_string(gf_redis, buf, sizeof buf, "HGET inv:2:{%s/%d}:cnt r", skus[s], k);
            reserved += atoll(buf);
        }
    SF_ASSERT_EQ(reserved, 4);
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 2), 1);
}

/* One --order-redis-call-budget for the whole cart: three items of 15 units in SKUs of 8
 * segments of 10 each: each item's probe (a lock and its release, 2 calls) falls short, the
 * other 7 segments are read (7) and one more lock is taken (2): 11 an item, plus each item's
 * layout read (1) and the intent's 3: within a budget of 30 each item is, the cart is not: 503,
 * nothing sold; two items fit. */
static void test_one_budget_for_the_cart(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-b1", "ct-b2", "ct-b3"};
    long long total[3] = {80, 80, 80};
    for (int i = 0; i < 3; i++)
        ct_put(skus[i], 80, 8, "");
    const char *args[] = {"--threads", "1", "--order-redis-call-budget", "30", NULL};
    sf_service *x = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(x != NULL, "%s", "an instance with a budget of 30");
    sf_resp r = {0};
    int st = ct_cart(sf_port(x),
                     "{\"sku\":\"ct-b1\",\"quantity\":15},{\"sku\":\"ct-b2\",\"quantity\":15},"
                     "{\"sku\":\"ct-b3\",\"quantity\":15}",
                     NULL, NULL, &r);
    SF_ASSERT(st == 503 && strcmp(sf_error_code(&r), "unavailable") == 0, "%s",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    /* two of them fit */
    st = ct_cart(sf_port(x),
                 "{\"sku\":\"ct-b1\",\"quantity\":15},{\"sku\":\"ct-b2\",\"quantity\":15}", NULL,
                 NULL, &r);
    SF_ASSERT(st == 201, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    SF_ASSERT(sf_stop(x) == 0, "%s", "the instance's exit");
    total[0] = total[1] = 80;
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 8), 1);
    SF_ASSERT_EQ(ct_remaining("ct-b3", 8), 80);
}

/* An item is planned without reading its segments first (order_multi.h, probe: one segment's
 * try-lock, the others read only when it falls short). Its stock only in a segment this instance
 * found empty (another instance cancelled an order there since) and in the one it did not, and
 * the item needing both: the probe falls short, the read finds the rest: 201 from two parts,
 * never insufficient_stock while the SKU holds the quantity; and a cart whose item's SKU is
 * short by one unit sells nothing (insufficient_stock). ~1 s. */
static void test_item_stock_where_thought_empty(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--sold-out-recheck-ms", "1000", NULL};
    sf_service *x = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(x != NULL, "%s", "an instance remembering empty segments for 1 s");
    for (int attempt = 0;; attempt++) {
        /* the precondition: 3 of the 4 segments cached empty on x when the cart comes (a loaded
         * machine may take the 1 s between: then again, with new SKUs) */
        SF_ASSERT(attempt < 10, "%s", "3 segments were never cached empty on time");
        char sku[32], other[32], shortsku[32], body[160], path[200], series[96];
        snprintf(sku, sizeof sku, "ct-e%d", attempt);
        snprintf(other, sizeof other, "ct-f%d", attempt);
        snprintf(shortsku, sizeof shortsku, "ct-g%d", attempt);
        ct_put(sku, 8, 4, "");
        ct_put(other, 12, 4, "");
        /* x sells three whole segments (2 units each): it marks them empty */
        char first[160] = "";
        int ks[3];
        for (int i = 0; i < 3; i++) {
            sf_resp r = {0};
            snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":2}", sku);
            int st =
                sf_json_request(NULL, sf_port(x), "POST", "/api/v1/orders", NULL, NULL, body, &r);
            SF_ASSERT(st == 201, "%s", sf_resp_summary(&r));
            ks[i] = (int)sf_json_int(r.json, "segment", -1);
            if (i == 0)
                snprintf(first, sizeof first, "%s",
                         json_string_value(json_object_get(r.json, "order_id")));
            sf_resp_free(&r);
        }
        /* another instance cancels the first: its 2 units are back in a segment x thinks empty */
        sf_resp r = {0};
        snprintf(path, sizeof path, "/api/v1/orders/%s", first);
        int st = sf_json_request(NULL, ct_port(1), "DELETE", path, CT_TOKEN, NULL, NULL, &r);
        SF_ASSERT(st == 200, "%s", sf_resp_summary(&r));
        sf_resp_free(&r);
        snprintf(series, sizeof series, "inventory_sku_segments_empty{sku=\"%s\"}", sku);
        double empty = sf_metric(sf_port(x), series);
        int rest = 0 + 1 + 2 + 3 - ks[0] - ks[1] - ks[2];
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":4},{\"sku\":\"%s\"}", sku, other);
        st = ct_cart(sf_port(x), body, NULL, NULL, &r);
        SF_ASSERT(st == 201, "the SKU holds 4 units: %s", sf_resp_summary(&r));
        json_t *parts =
            json_object_get(json_array_get(json_object_get(r.json, "items"), 0), "parts");
        SF_ASSERT(json_array_size(parts) == 2, "two parts: %s", sf_resp_summary(&r));
        for (size_t i = 0; i < 2; i++) {
            int k = (int)sf_json_int(json_array_get(parts, i), "segment", -1);
            SF_ASSERT(k == ks[0] || k == rest, "part in segment %d: %s", k, sf_resp_summary(&r));
        }
        sf_resp_free(&r);
        const char *skus[2] = {sku, other};
        long long total[2] = {8, 12};
        SF_ASSERT_EQ(ct_whole(skus, total, 2, 4), 1);
        SF_ASSERT_EQ(ct_remaining(sku, 4), 0);
        if (empty != 3)
            continue; /* sold right, but the cache was not as the test needs: again */
        /* an item's SKU short by one unit, none of it seen here: every segment read before the
         * answer, nothing sold */
        ct_put(shortsku, 7, 4, "");
        snprintf(body, sizeof body, "{\"sku\":\"%s\"},{\"sku\":\"%s\",\"quantity\":8}", other,
                 shortsku);
        st = ct_cart(sf_port(x), body, NULL, NULL, &r);
        SF_ASSERT(st == 409 && strcmp(sf_error_code(&r), "insufficient_stock") == 0, "%s",
                  sf_resp_summary(&r));
        const char *named = json_string_value(json_object_get(r.json, "sku"));
        SF_ASSERT(named && strcmp(named, shortsku) == 0, "%s", sf_resp_summary(&r));
        sf_resp_free(&r);
        SF_ASSERT_EQ(ct_remaining(shortsku, 4), 7);
        SF_ASSERT_EQ(ct_remaining(other, 4), 11);
        printf("thought empty: the cache as needed on attempt %d\n", attempt + 1);
        break;
    }
    SF_ASSERT(sf_stop(x) == 0, "%s", "the instance's exit");
}

/* ---- contention ---- */

#define CT_CLIENTS 12
static const char *const cskus[5] = {"ct-c0", "ct-c1", "ct-c2", "ct-c3", "ct-c4"};
static atomic_int c_created, c_refused, c_busy, c_other;
static atomic_llong c_slowest;

static void *ct_client(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    sf_conn *conn = sf_conn_open(ct_port((int)(uintptr_t)arg), 5000);
    int sold_out_in_a_row = 0;
    while (sold_out_in_a_row < 6) {
        int n = 2 + (int)(rand_r(&seed) % 2), pick[3], used = 0;
        while (used < n) {
            int s = (int)(rand_r(&seed) % 5), dup = 0;
            for (int j = 0; j < used; j++)
                dup |= pick[j] == s;
            if (!dup)
                pick[used++] = s;
        }
        char items[512];
        size_t w = 0;
        for (int i = 0; i < n; i++)
            w += (size_t)snprintf(items + w, sizeof items - w, "%s{\"sku\":\"%s\",\"quantity\":%d}",
                                  i ? "," : "", cskus[pick[i]], 1 + (int)(rand_r(&seed) % 3));
        char body[600];
        snprintf(body, sizeof body, "{\"items\":[%s]}", items);
        sf_resp r = {0};
        int64_t t0 = tu_now_ms();
        int st = sf_json_request(conn, 0, "POST", "/api/v1/orders", NULL, NULL, body, &r);
        int64_t took = tu_now_ms() - t0;
        long long prev = atomic_load(&c_slowest);
        while (took > prev && !atomic_compare_exchange_weak(&c_slowest, &prev, took))
            ;
        if (st == 201) {
            atomic_fetch_add(&c_created, 1);
            sold_out_in_a_row = 0;
        } else if (st == 409) {
            atomic_fetch_add(&c_refused, 1);
            sold_out_in_a_row++;
        } else if (st == 503 && strcmp(sf_error_code(&r), "lock_timeout") == 0) {
            atomic_fetch_add(&c_busy, 1);
        } else {
            fprintf(stderr, "cart: %s\n", sf_resp_summary(&r));
            atomic_fetch_add(&c_other, 1);
            sold_out_in_a_row++;
        }
        sf_resp_free(&r);
    }
    sf_conn_close(conn);
    return NULL;
}

static void test_contention_no_partial_cart(void **state)
{
    (void)state;
    long long total[5];
    for (int i = 0; i < 5; i++)
        ct_put(cskus[i], total[i] = 60, 3, "");
    pthread_t t[CT_CLIENTS];
    for (int i = 0; i < CT_CLIENTS; i++)
        pthread_create(&t[i], NULL, ct_client, (void *)(uintptr_t)i);
    for (int i = 0; i < CT_CLIENTS; i++)
        pthread_join(t[i], NULL);
    fprintf(stderr,
            "contention: %d carts, %d refused, %d lock_timeout, %d other; slowest %lld ms\n",
            atomic_load(&c_created), atomic_load(&c_refused), atomic_load(&c_busy),
            atomic_load(&c_other), (long long)atomic_load(&c_slowest));
    SF_ASSERT(atomic_load(&c_created) > 20, "only %d carts", atomic_load(&c_created));
    SF_ASSERT_EQ(atomic_load(&c_other), 0);
    /* every request answered within its lock wait (default 2 s), plus the machine's load */
    SF_ASSERT(atomic_load(&c_slowest) < 6000, "a cart took %lld ms",
              (long long)atomic_load(&c_slowest));
    int carts = ct_whole(cskus, total, 5, 3);
    SF_ASSERT_EQ(carts, atomic_load(&c_created));
    for (int i = 0; i < 5; i++)
        SF_ASSERT_EQ(ct_intents(cskus[i]), 0);
}

/* ---- cut-off points ---- */

/* Starts an instance that dies at point (faultpoint.h). */
static sf_service *ct_faulty(const char *point)
{
    setenv("INVENTORY_FAULTPOINT", point, 1);
    const char *args[] = {"--threads",
                          "1",
                          "--admin-token",
                          CT_TOKEN,
                          "--redis-timeout-ms",
                          "500",
                          "--lock-wait-ms",
                          "800",
                          "--lock-lease-ms",
                          "1000",
                          NULL};
    sf_service *s = sf_start(rf_url(gf_redis), args);
    unsetenv("INVENTORY_FAULTPOINT");
    SF_ASSERT(s != NULL, "%s", "start the faulty instance");
    return s;
}

/* A cart of 3 SKUs (the second on two segments) cut off at point: no answer, the intent left
 * in the home SKU's cart hash with the state of its step: parts (all but the primary) and
 * primary present or not. */
static void ct_killed_at(const char *prefix, const char *point, int parts, int primary)
{
    char a[40], b[40], c[40], items[256];
    snprintf(a, sizeof a, "%s-a", prefix);
    snprintf(b, sizeof b, "%s-b", prefix);
    snprintf(c, sizeof c, "%s-c", prefix);
    ct_put(a, 20, 2, "");
    ct_put(b, 20, 2, "");
    ct_put(c, 20, 2, "");
    snprintf(items, sizeof items,
             "{\"sku\":\"%s\"},{\"sku\":\"%s\",\"quantity\":15},{\"sku\":\"%s\",\"quantity\":2}", b,
             a, c);
    sf_service *x = ct_faulty(point);
    sf_resp r = {0};
    ct_cart(sf_port(x), items, NULL, NULL, &r);
    SF_ASSERT(r.status == 0, "the killed instance answered: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    for (int t = 0; t < 100 && sf_alive(x); t++)
        tu_sleep_ms(20);
    SF_ASSERT(!sf_alive(x), "%s", "the instance did not die at its fault point");
    (void)sf_stop(x);
    /* the intent: home b, every part named */
    char intent[4096] = "";
    redisReply *rep = rf_command(gf_redis, "HVALS inv:2:{%s}:cart", b);
    SF_ASSERT(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1,
              "%s: one intent expected", point);
    snprintf(intent, sizeof intent, "%s", rep->element[0]->str);
    freeReplyObject(rep);
    json_t *in = json_loads(intent, 0, NULL);
    json_t *ip = json_object_get(in, "parts");
    const char *id = json_string_value(json_object_get(in, "order"));
    SF_ASSERT(id && json_is_array(ip) && json_array_size(ip) == 4 &&
                  json_is_integer(json_object_get(in, "deadline")),
              "intent %s", intent);
    long long made = 0, prim = 0;
    size_t i;
    json_t *p;
    json_array_foreach(ip, i, p)
    {
        int k = (int)json_integer_value(json_array_get(p, 0));
        const char *sku = json_string_value(json_array_get(p, 2));
        char pid[160];
        snprintf(pid, sizeof pid, "%.32s-%d-%s", id, k, sku);
        if (strcmp(pid, id) == 0)
            prim += ct_exists(sku, k, pid);
        else
            made += ct_exists(sku, k, pid);
    }
    json_decref(in);
    SF_ASSERT(made == (parts ? 3 : 0) && prim == primary,
              "%s: %lld of 3 parts and %lld primary, expected %d and %d", point, made, prim,
              parts ? 3 : 0, primary);
}

static void test_cart_killed_after_intent(void **state)
{
    (void)state;
    ct_killed_at("ct-ki", "cart_intent", 0, 0);
}

static void test_cart_killed_after_parts(void **state)
{
    (void)state;
    ct_killed_at("ct-kp", "cart_parts", 1, 0);
}

static void test_cart_killed_after_primary(void **state)
{
    (void)state;
    ct_killed_at("ct-kq", "cart_primary", 1, 1);
}

/* ---- on a Redis Cluster ---- */

/* The node holding key's slot. */
static rf_server *ct_node_of(cf_cluster *cl, const char *key)
{
    redisReply *r = rf_command(cf_node(cl, 0), "CLUSTER KEYSLOT %s", key);
    int m = r && r->type == REDIS_REPLY_INTEGER ? cf_master_of(cl, (int)r->integer) : -1;
    freeReplyObject(r);
    SF_ASSERT(m >= 0, "the master of %s", key);
    return cf_node(cl, m);
}

static long long ct_cl_stock(cf_cluster *cl, const char *sku, int nseg)
{
    long long sum = 0;
    for (int k = 0; k < nseg; k++) {
        char key[160], buf[32] = "";
        snprintf(key, sizeof key, "inv:2:{%s/%d}:stock", sku, k);
        SF_ASSERT(rf_string(ct_node_of(cl, key), buf, sizeof buf, "GET %s", key) == 1, "GET %s",
                  key);
        sum += atoll(buf);
    }
    return sum;
}

/* Every part of the cart answered in r exists on its master (the primary too). */
static void ct_cl_parts(cf_cluster *cl, const sf_resp *r)
{
    const char *id = json_string_value(json_object_get(r->json, "order_id"));
    size_t a, b;
    json_t *it, *p;
    json_array_foreach(json_object_get(r->json, "items"), a, it)
    {
        const char *sku = json_string_value(json_object_get(it, "sku"));
        json_array_foreach(json_object_get(it, "parts"), b, p)
        {
            int k = (int)sf_json_int(p, "segment", -1);
            char key[160], pid[160];
            snprintf(key, sizeof key, "inv:2:{%s/%d}:orders", sku, k);
            snprintf(pid, sizeof pid, "%.32s-%d-%s", id, k, sku);
            SF_ASSERT(rf_integer(ct_node_of(cl, key), "HEXISTS %s %s", key, pid) == 1,
                      "part %s missing", pid);
        }
    }
}

static void test_cluster_carts(void **state)
{
    (void)state;
    cf_cluster *cl = cf_start(3, 0);
    SF_ASSERT(cl != NULL, "%s", "a 3-master cluster");
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    const char *args[] = {"--threads", "2", "--admin-token", CT_TOKEN, "--trust-body-user-id",
                          NULL};
    sf_service *s = sf_start(url, args);
    if (!s)
        cf_stop(cl);
    SF_ASSERT(s != NULL, "%s", "inventoryd on the cluster");
    int port = sf_port(s);
    const char *skus[4] = {"cl-home", "cl-multi", "cl-limit", "cl-hold"};
    const char *rules[4] = {"", "", ",\"limit_per_user\":3", ",\"reservation_ttl_s\":120"};
    for (int i = 0; i < 4; i++) {
        char path[160], body[256];
        snprintf(path, sizeof path, "/api/v1/skus/%s", skus[i]);
        snprintf(body, sizeof body, "{\"stock\":40,\"segments\":4%s}", rules[i]);
        sf_resp r = {0};
        sf_json_request(NULL, port, "PUT", path, CT_TOKEN, NULL, body, &r);
        SF_ASSERT(r.status == 201, "PUT %s: %s", skus[i], sf_resp_summary(&r));
        sf_resp_free(&r);
    }
    /* masters: the SKUs' slots spread over at least two */
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        char key[160];
        snprintf(key, sizeof key, "inv:2:{%s}:meta", skus[i]);
        for (int m = 0; m < 3; m++)
            if (ct_node_of(cl, key) == cf_node(cl, m))
                seen |= 1 << m;
    }
    SF_ASSERT(__builtin_popcount((unsigned)seen) >= 2, "SKUs on masters %#x", seen);
    sf_resp r = {0};
    SF_ASSERT(ct_cart(port,
                      "{\"sku\":\"cl-home\"},{\"sku\":\"cl-multi\",\"quantity\":25},"
                      "{\"sku\":\"cl-limit\",\"quantity\":3}",
                      "u-cl", "cl-key", &r) == 201,
              "%s", sf_resp_summary(&r));
    ct_cl_parts(cl, &r);
    sf_resp_free(&r);
    SF_ASSERT(ct_cart(port,
                      "{\"sku\":\"cl-home\"},{\"sku\":\"cl-multi\",\"quantity\":25},"
                      "{\"sku\":\"cl-limit\",\"quantity\":3}",
                      "u-cl", "cl-key", &r) == 200,
              "replay: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* over the limit (reserved on the limit SKU's master): nothing sold */
    SF_ASSERT(ct_cart(port, "{\"sku\":\"cl-multi\"},{\"sku\":\"cl-limit\"}", "u-cl", NULL, &r) ==
                      409 &&
                  strcmp(sf_error_code(&r), "limit_exceeded") == 0,
              "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* a hold item under a home SKU without a TTL: the cart is a hold, the home SKU flagged */
    SF_ASSERT(ct_cart(port, "{\"sku\":\"cl-home\",\"quantity\":2},{\"sku\":\"cl-hold\"}", NULL,
                      NULL, &r) == 201,
              "%s", sf_resp_summary(&r));
    SF_ASSERT(json_string_value(json_object_get(r.json, "expires_at")) != NULL, "%s",
              sf_resp_summary(&r));
    ct_cl_parts(cl, &r);
    sf_resp_free(&r);
    char buf[16] = "";
    SF_ASSERT(rf_string(ct_node_of(cl, "inv:2:{cl-home}:meta"), buf, sizeof buf,
                        "HGET inv:2:{cl-home}:meta holds") == 1 &&
                  strcmp(buf, "1") == 0,
              "the home SKU's hold flag: %s", buf);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-home", 4), 37);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-multi", 4), 15);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-limit", 4), 37);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-hold", 4), 39);
    SF_ASSERT(rf_integer(ct_node_of(cl, "inv:2:{cl-home}:cart"), "HLEN inv:2:{cl-home}:cart") == 0,
              "%s", "an intent left");
    int rc = sf_stop(s);
    cf_stop(cl);
    SF_ASSERT(rc == 0, "%s", "inventoryd's exit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_carts_of_two_to_five),
        cmocka_unit_test(test_refusals_sell_nothing),
        cmocka_unit_test(test_multi_segment_item_replay_get),
        cmocka_unit_test(test_limit_in_another_item),
        cmocka_unit_test(test_hold_cart),
        cmocka_unit_test(test_one_budget_for_the_cart),
        cmocka_unit_test(test_item_stock_where_thought_empty),
        cmocka_unit_test(test_contention_no_partial_cart),
        cmocka_unit_test(test_cart_killed_after_intent),
        cmocka_unit_test(test_cart_killed_after_parts),
        cmocka_unit_test(test_cart_killed_after_primary),
        cmocka_unit_test(test_cluster_carts),
    };
    /* IT_CART_PART (ctest runs it_cart and it_cart_cluster): "cluster" the cluster's test only,
     * "one-redis" the others; unset, every test */
    const char *part = getenv("IT_CART_PART");
    if (part && strcmp(part, "cluster") == 0)
        cmocka_set_test_filter("*cluster*");
    else if (part && strcmp(part, "one-redis") == 0)
        cmocka_set_skip_filter("*cluster*");
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
