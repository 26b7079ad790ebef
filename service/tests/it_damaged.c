/*
 * Scripts that check before they write (issue 9): Redis does not roll a script back, so a
 * commit or a cancel that failed half-way (a counter that is not a number, a key of the wrong
 * type) would leave drift. Here a segment is damaged on purpose in a real redis-server, and:
 *   - an order on it changes nothing (stock, counters, records) and answers 503;
 *   - a cancel on it changes nothing and answers 503;
 *   - orders fail over from the damaged segment to the others and are placed (one Redis error
 *     on one segment is not the order's answer while other segments can serve).
 * After repairing the damage the invariant checker (SPEC §8) passes.
 */
#include "svc_test.h"

#define DM_TOKEN "damaged-test-token"

static sf_service *svc;
static int port;

static int group_setup(void **state)
{
    if (sf_redis_group_setup(state) != 0)
        return -1;
    const char *args[] = {"--threads", "4", "--admin-token", DM_TOKEN, NULL};
    svc = sf_start(rf_url(sf_redis), args);
    if (svc == NULL)
        return -1;
    port = sf_port(svc);
    return 0;
}

static int group_teardown(void **state)
{
    int bad = svc != NULL && sf_stop(svc) != 0;
    return sf_redis_group_teardown(state) != 0 || bad ? -1 : 0;
}

static void put(const char *sku, long long stock, int segments)
{
    sf_resp r = {0};
    sf_put_sku(port, DM_TOKEN, sku, stock, segments, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
}

static void redis_do(const char *fmt, const char *sku, int k, const char *value)
{
    redisReply *r = rf_command(sf_redis, fmt, sku, k, value);
    SF_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt,
              r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

static long long seg_stock(const char *sku, int k)
{
    char buf[32];
    SF_ASSERT(rf_string(sf_redis, buf, sizeof buf, "GET inv:2:{%s/%d}:stock", sku, k) == 1,
              "%s", "GET stock");
    return atoll(buf);
}

static void test_order_on_damaged_segment_changes_nothing(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "dmord");
    put(sku, 10, 1);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "not-a-number");
    sf_resp r = {0};
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    sf_resp_free(&r);
    SF_ASSERT_EQ(seg_stock(sku, 0), 10);
    SF_ASSERT_EQ(rf_integer(sf_redis, "HLEN inv:2:{%s/0}:orders", sku), 0);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "0");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(sf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 0);
}

static void test_cancel_on_damaged_segment_changes_nothing(void **state)
{
    (void)state;
    char sku[64], path[200];
    tu_unique_name(sku, sizeof sku, "dmcan");
    put(sku, 10, 1);
    sf_resp r = {0};
    sf_order(NULL, port, sku, 2, &r);
    SF_ASSERT_STATUS(&r, 201);
    snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    redis_do("HSET inv:2:{%s/%d}:cnt o %s", sku, 0, "not-a-number");
    sf_json_request(NULL, port, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    SF_ASSERT_EQ(seg_stock(sku, 0), 8);
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "created") == 0, "order after a failed cancel: %s",
              r.body);
    redis_do("HSET inv:2:{%s/%d}:cnt o %s", sku, 0, "1");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(sf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 2);
    /* Repaired, the cancel works and gives the units back once. */
    sf_json_request(NULL, port, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(seg_stock(sku, 0), 10);
    SF_ASSERT_INVARIANTS(rf_url(sf_redis), sku, &rep);
}

static void test_orders_fail_over_from_damaged_segment(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "dmfo");
    put(sku, 20, 2);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "not-a-number");
    for (int i = 0; i < 8; i++) {
        sf_resp r = {0};
        sf_order(NULL, port, sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        SF_ASSERT_EQ(sf_json_int(r.json, "segment", -1), 1);
        sf_resp_free(&r);
    }
    SF_ASSERT_EQ(seg_stock(sku, 0), 10);
    SF_ASSERT_EQ(seg_stock(sku, 1), 2);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "0");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(sf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_on_damaged_segment_changes_nothing),
        cmocka_unit_test(test_cancel_on_damaged_segment_changes_nothing),
        cmocka_unit_test(test_orders_fail_over_from_damaged_segment),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
