/*
 * The sold-out fast path and its bound (SPEC §6 step 2): once an instance knows a SKU's current
 * version is sold out it answers 409 without Redis (inventory_orders_sold_out_fast_total grows
 * on every instance, also one that learnt it from its own first 409), and a restock, a cancel or
 * a re-PUT made through another instance ends that within 1 s: polling every 50 ms, an order
 * on the first instance succeeds no later than 1 s (plus a small margin) after the change.
 * A DELETE likewise turns the other instance's sold_out into 404 unknown_sku.
 */
#include "svc_test.h"

#define SO_POLL_MS 50
#define SO_BOUND_MS 1000
#define SO_MARGIN_MS 150
#define SO_FAST_TRIES 20

static sf_service *a, *b;
static int pa, pb;

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "4", NULL};
    if (!(a = sf_group_service(args)) || !(b = sf_group_service(args)))
        return -1;
    pa = sf_port(a);
    pb = sf_port(b);
    return 0;
}

static double fast_count(int port)
{
    return sf_metric(port, "inventory_orders_sold_out_fast_total");
}

/* PUTs sku and sells it out through instance A, one unit at a time. Returns the order ids
 * (a new JSON array). */
static json_t *sell_out(const char *sku, long long stock, int segments)
{
    sf_resp r = {0};
    sf_put_sku(pa, NULL, sku, stock, segments, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT: %s", sf_resp_summary(&r));
    json_t *ids = json_array();
    for (long long i = 0; i < stock; i++) {
        sf_order(NULL, pa, sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        json_array_append(ids, json_object_get(r.json, "order_id"));
    }
    sf_order(NULL, pa, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 409, "sold_out");
    sf_resp_free(&r);
    return ids;
}

/* Fires SO_FAST_TRIES orders at port; all must be 409 sold_out. Returns how many the instance
 * answered from its sold-out cache. */
static double expect_sold_out_fast(int port, const char *sku)
{
    double before = fast_count(port);
    sf_conn *c = sf_conn_open(port, 0);
    sf_resp r = {0};
    for (int i = 0; i < SO_FAST_TRIES; i++) {
        sf_order(c, 0, sku, 1, &r);
        SF_ASSERT_ERROR(&r, 409, "sold_out");
    }
    sf_resp_free(&r);
    sf_conn_close(c);
    return fast_count(port) - before;
}

/* Orders one unit on port every SO_POLL_MS until a 201; fails unless it comes within the bound.
 * Returns the milliseconds it took. */
static int64_t poll_until_sold(int port, const char *sku, const char *after_what)
{
    int64_t t0 = tu_now_ms(), took = -1;
    sf_resp r = {0};
    int polls = 0;
    while (tu_now_ms() - t0 <= SO_BOUND_MS + SO_MARGIN_MS + 500) {
        polls++;
        int st = sf_order(NULL, port, sku, 1, &r);
        if (st == 201) {
            took = tu_now_ms() - t0;
            break;
        }
        if (st != 409 || strcmp(sf_error_code(&r), "sold_out") != 0)
            sf_fail_at(__FILE__, __LINE__, "while polling", "after %s: %s", after_what,
                       sf_resp_summary(&r));
        tu_sleep_ms(SO_POLL_MS);
    }
    sf_resp_free(&r);
    fprintf(stderr, "after %s: first order on the other instance after %lld ms (%d polls)\n",
            after_what, (long long)took, polls);
    SF_ASSERT(took >= 0 && took <= SO_BOUND_MS + SO_MARGIN_MS,
              "after %s the other instance still said sold_out for %lld ms (bound %d ms)",
              after_what, (long long)(took >= 0 ? took : tu_now_ms() - t0), SO_BOUND_MS);
    return took;
}

static void test_sold_out_fast_then_restock(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "soldout");
    json_decref(sell_out(sku, 40, 4));

    /* A learnt it while selling out, B from its first 409: both answer from memory now. */
    double fa = expect_sold_out_fast(pa, sku);
    double fb = expect_sold_out_fast(pb, sku);
    SF_ASSERT(fa >= SO_FAST_TRIES - 2 && fb >= SO_FAST_TRIES - 2,
              "of %d sold_out answers, A served %g and B %g without Redis", SO_FAST_TRIES, fa, fb);

    sf_resp r = {0};
    sf_restock(pb, NULL, sku, 10, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(sf_json_int(r.json, "remaining", -1), 10);
    sf_resp_free(&r);
    poll_until_sold(pa, sku, "a restock through B");
    /* B, which made the restock, sells at once. */
    sf_order(NULL, pb, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);

    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.stock_total == 50 && rep.sold == 42 && rep.remaining == 8,
              "stock_total %lld sold %lld remaining %lld", rep.stock_total, rep.sold,
              rep.remaining);
}

static void test_cancel_ends_sold_out_elsewhere(void **state)
{
    (void)state;
    char sku[64], path[256];
    tu_unique_name(sku, sizeof sku, "soldout-cancel");
    json_t *ids = sell_out(sku, 10, 2);
    SF_ASSERT(expect_sold_out_fast(pb, sku) >= SO_FAST_TRIES - 2, "%s", "B not fast");

    snprintf(path, sizeof path, "/api/v1/orders/%s", json_string_value(json_array_get(ids, 3)));
    sf_resp r = {0};
    sf_json_request(NULL, pa, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    poll_until_sold(pb, sku, "a cancel through A");
    json_decref(ids);

    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.sold == 10 && rep.remaining == 0 && rep.cancelled == 1,
              "sold %lld remaining %lld cancelled %lld", rep.sold, rep.remaining, rep.cancelled);
}

static void test_reput_ends_sold_out_elsewhere(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "soldout-reput");
    json_decref(sell_out(sku, 8, 2));
    SF_ASSERT(expect_sold_out_fast(pa, sku) >= SO_FAST_TRIES - 2, "%s", "A not fast");
    SF_ASSERT(expect_sold_out_fast(pb, sku) >= SO_FAST_TRIES - 2, "%s", "B not fast");

    sf_resp r = {0};
    sf_put_sku(pb, NULL, sku, 5, 3, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    poll_until_sold(pa, sku, "a re-PUT through B");

    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.segments == 3 && rep.stock_total == 5 && rep.sold == 1,
              "segments %d stock_total %lld sold %lld", rep.segments, rep.stock_total, rep.sold);
}

/* DELETE through A of a SKU that B knows (its layout is cached) but that is not sold out:
 * B's next order finds the segments gone and answers 404 unknown_sku at once. */
static void test_delete_seen_elsewhere(void **state)
{
    (void)state;
    char sku[64], path[160];
    tu_unique_name(sku, sizeof sku, "delete-elsewhere");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_put_sku(pa, NULL, sku, 20, 4, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_order(NULL, pb, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_json_request(NULL, pa, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    for (int i = 0; i < 3; i++) {
        sf_order(NULL, pb, sku, 1, &r);
        SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    }
    sf_resp_free(&r);
}

/*
 * DELETE of a sold-out SKU through A while B remembers it sold out: B may say sold_out within
 * the bound, then must say 404 unknown_sku like A. (It must never claim that Redis is down.)
 */
static void test_delete_of_sold_out_sku_seen_elsewhere(void **state)
{
    (void)state;
    char sku[64], path[160];
    tu_unique_name(sku, sizeof sku, "soldout-delete");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    json_decref(sell_out(sku, 4, 2));
    SF_ASSERT(expect_sold_out_fast(pb, sku) >= SO_FAST_TRIES - 2, "%s", "B not fast");

    sf_resp r = {0};
    sf_json_request(NULL, pa, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_order(NULL, pa, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");

    int64_t t0 = tu_now_ms(), took = -1;
    while (tu_now_ms() - t0 <= SO_BOUND_MS + SO_MARGIN_MS) {
        int st = sf_order(NULL, pb, sku, 1, &r);
        if (st == 404) {
            SF_ASSERT_ERROR(&r, 404, "unknown_sku");
            took = tu_now_ms() - t0;
            break;
        }
        if (st != 409 || strcmp(sf_error_code(&r), "sold_out") != 0)
            sf_fail_at(__FILE__, __LINE__, "after DELETE",
                       "%lld ms after the SKU was deleted through A, B answered %s "
                       "(A answers 404 unknown_sku)",
                       (long long)(tu_now_ms() - t0), sf_resp_summary(&r));
        tu_sleep_ms(SO_POLL_MS);
    }
    SF_ASSERT(took >= 0, "B still said sold_out %d ms after the DELETE", SO_BOUND_MS);
    for (int i = 0; i < 5; i++) {
        sf_order(NULL, pb, sku, 1, &r);
        SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    }
    sf_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sold_out_fast_then_restock),
        cmocka_unit_test(test_cancel_ends_sold_out_elsewhere),
        cmocka_unit_test(test_reput_ends_sold_out_elsewhere),
        cmocka_unit_test(test_delete_seen_elsewhere),
        cmocka_unit_test(test_delete_of_sold_out_sku_seen_elsewhere),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
