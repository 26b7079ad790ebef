/*
 * What a 503 of PUT, restock, DELETE and cancel means (issue 18 item 6, docs/api.md "What a 503
 * means"), against a real redis-server and a real inventoryd: a plain 503 says nothing changed;
 * once the write may have reached Redis, the 503 carries "outcome": "unknown".
 *
 *   - Redis frozen (SIGSTOP) while the write's script is in flight: the reply times out, and
 *     once thawed Redis runs the script it had received. The 503 must say "unknown" (it said
 *     nothing on the old binary, and a keyless retry then restocked twice);
 *   - a restock registered, then its settle failed (a segment key of the wrong type): 503
 *     unknown, and the next read applies it once (plain 503 on the old binary);
 *   - a restock behind more than 32 pending ones: never 409 "nothing was added" while it is
 *     still pending (the old binary looked only at the first 32 pending entries and answered
 *     409; the restock was then applied by the next read).
 */
#include "svc_test.h"

#define AO_TOKEN "admin-outcome-token"
#define AO_REDIS_TIMEOUT_MS 300
/* Generous: none of these decides an outcome. */
#define AO_THAW_MS 10000

static sf_service *svc;
static int port;

static int group_setup(void **state)
{
    (void)state;
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", AO_REDIS_TIMEOUT_MS);
    const char *args[] = {"--threads", "2", "--admin-token", AO_TOKEN, "--redis-timeout-ms",
                          timeout,     NULL};
    svc = sf_group_service(args);
    port = svc != NULL ? sf_port(svc) : 0;
    return svc != NULL ? 0 : -1;
}

static long long stock_total(const char *sku)
{
    json_t *st = sf_sku_status(port, sku);
    SF_ASSERT(st != NULL, "GET %s", sku);
    long long t = sf_json_int(st, "stock_total", -1);
    json_decref(st);
    return t;
}

/* Every admin script once, so that Redis knows them by SHA before it is frozen (an EVALSHA it
 * did not know would be refused with NOSCRIPT once thawed, and nothing would have changed). */
static void warm_up(void)
{
    char sku[64], path[200];
    tu_unique_name(sku, sizeof sku, "ao-warm");
    SF_PUT_SKU(port, AO_TOKEN, sku, 10, 1);
    sf_resp r = {0};
    sf_restock(port, AO_TOKEN, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    sf_json_request(NULL, port, "DELETE", path, AO_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_json_request(NULL, port, "DELETE", path, AO_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);
}

/* Sends method path body while redis-server is frozen, into *r, then thaws it. */
static void while_frozen(const char *method, const char *path, const char *body, sf_resp *r)
{
    SF_ASSERT(rf_pause(gf_redis) == 0, "%s", "could not SIGSTOP redis-server");
    sf_json_request(NULL, port, method, path, AO_TOKEN, NULL, body, r);
    rf_resume(gf_redis);
}

/* Polls Redis until the integer fmt answers want (or AO_THAW_MS passed); the last answer. */
static long long wait_integer(long long want, const char *fmt, const char *sku)
{
    int64_t until = tu_now_ms() + AO_THAW_MS;
    long long got;
    while ((got = rf_integer(gf_redis, fmt, sku)) != want && tu_now_ms() < until)
        tu_sleep_ms(20);
    return got;
}

/* wait_integer for a string holding a number (GET of a counter). */
static long long wait_number(long long want, const char *fmt, const char *sku)
{
    int64_t until = tu_now_ms() + AO_THAW_MS;
    char buf[32];
    long long got;
    while ((got = rf_string(gf_redis, buf, sizeof buf, fmt, sku) == 1 ? atoll(buf) : -1) != want &&
           tu_now_ms() < until)
        tu_sleep_ms(20);
    return got;
}

static void test_writes_sent_to_frozen_redis_are_unknown(void **state)
{
    (void)state;
    warm_up();
    char sku[64], path[200];
    sf_resp r = {0};

    /* Restock, no key: once thawed the restock is registered (and the next read applies it);
     * a plain 503 would tell the client to send it again. */
    tu_unique_name(sku, sizeof sku, "ao-rst");
    SF_PUT_SKU(port, AO_TOKEN, sku, 10, 1);
    snprintf(path, sizeof path, "/api/v1/skus/%s/restock", sku);
    while_frozen("POST", path, "{\"quantity\": 5}", &r);
    SF_ASSERT_OUTCOME_UNKNOWN(&r);
    SF_ASSERT_EQ(wait_integer(1, "HLEN inv:2:{%s}:rst", sku), 1);
    SF_ASSERT_EQ(stock_total(sku), 15);

    /* PUT, no key: its first step, the registry's SADD (issue 20), meets the frozen Redis, so
     * its meta write is never sent: a plain 503, and once thawed the SKU is as it was. */
    tu_unique_name(sku, sizeof sku, "ao-put");
    long long v = SF_PUT_SKU(port, AO_TOKEN, sku, 10, 1);
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    while_frozen("PUT", path, "{\"stock\": 30, \"segments\": 2}", &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    char ver[32] = "";
    SF_ASSERT(rf_string(gf_redis, ver, sizeof ver, "GET inv:2:{%s}:ver", sku) == 1 &&
                  atoll(ver) == v,
              "the version counter is %s after the refused PUT, was %lld", ver, v);
    SF_ASSERT_EQ(stock_total(sku), 10);
    int64_t until;

    /* DELETE. */
    tu_unique_name(sku, sizeof sku, "ao-del");
    SF_PUT_SKU(port, AO_TOKEN, sku, 10, 1);
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    while_frozen("DELETE", path, NULL, &r);
    SF_ASSERT_OUTCOME_UNKNOWN(&r);
    char segs[32] = "";
    until = tu_now_ms() + AO_THAW_MS;
    while ((rf_string(gf_redis, segs, sizeof segs, "HGET inv:2:{%s}:meta segments", sku) != 1 ||
            strcmp(segs, "0") != 0) &&
           tu_now_ms() < until)
        tu_sleep_ms(20);
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");

    /* Cancel. */
    tu_unique_name(sku, sizeof sku, "ao-can");
    SF_PUT_SKU(port, AO_TOKEN, sku, 10, 1);
    sf_order(NULL, port, sku, 3, &r);
    SF_ASSERT_STATUS(&r, 201);
    snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    while_frozen("DELETE", path, NULL, &r);
    SF_ASSERT_OUTCOME_UNKNOWN(&r);
    SF_ASSERT_EQ(wait_number(10, "GET inv:2:{%s/0}:stock", sku), 10);
    sf_json_request(NULL, port, "DELETE", path, AO_TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "already_cancelled");
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

/* A restock registered whose settle then fails (segment 1's counters are a string, so its
 * RESTOCK_APPLY fails with WRONGTYPE): 503 unknown, and once repaired the next read applies it
 * once. */
static void test_restock_whose_settle_fails_is_unknown(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "ao-rset");
    SF_PUT_SKU(port, AO_TOKEN, sku, 10, 2);
    redisReply *x =
        rf_command(gf_redis, "RENAME inv:2:{%s/1}:cnt inv:2:{%s/1}:cnt-aside", sku, sku);
    SF_ASSERT(x != NULL && x->type == REDIS_REPLY_STATUS, "%s", "RENAME cnt");
    freeReplyObject(x);
    x = rf_command(gf_redis, "SET inv:2:{%s/1}:cnt not-a-hash", sku);
    freeReplyObject(x);
    sf_resp r = {0};
    sf_restock(port, AO_TOKEN, sku, 6, &r);
    SF_ASSERT_OUTCOME_UNKNOWN(&r);
    sf_resp_free(&r);
    x = rf_command(gf_redis, "RENAME inv:2:{%s/1}:cnt-aside inv:2:{%s/1}:cnt", sku, sku);
    SF_ASSERT(x != NULL && x->type == REDIS_REPLY_STATUS, "%s", "RENAME back");
    freeReplyObject(x);
    SF_ASSERT_EQ(stock_total(sku), 16);
    SF_ASSERT_EQ(stock_total(sku), 16);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

/* 160 restocks pending ahead of this one (1 unit each): one settle applies 4 rounds of 32, so
 * this one is still pending when the request asks. Small hashes keep their insertion order
 * (listpack), so it is the last entry and was never among the old binary's first 32. */
static void test_restock_behind_many_pending_is_never_409(void **state)
{
    (void)state;
    enum { AHEAD = 160, UNITS = 1000 };
    redisReply *x = rf_command(gf_redis, "CONFIG SET hash-max-listpack-entries 1024");
    SF_ASSERT(x != NULL && x->type == REDIS_REPLY_STATUS, "%s", "CONFIG SET");
    freeReplyObject(x);
    char sku[64];
    tu_unique_name(sku, sizeof sku, "ao-many");
    long long v = SF_PUT_SKU(port, AO_TOKEN, sku, 0, 1);
    for (int i = 0; i < AHEAD; i++) {
        long long rid = rf_integer(gf_redis, "HINCRBY inv:2:{%s}:meta rseq 1", sku);
        x = rf_command(gf_redis, "HSET inv:2:{%s}:rst %lld %lld:1", sku, rid, v);
        SF_ASSERT(x != NULL && x->type == REDIS_REPLY_INTEGER, "%s", "HSET rst");
        freeReplyObject(x);
    }
    sf_resp r = {0};
    sf_restock(port, AO_TOKEN, sku, UNITS, &r);
    SF_ASSERT(r.status != 409, "a restock still pending answered %s", sf_resp_summary(&r));
    if (r.status != 200)
        SF_ASSERT_OUTCOME_UNKNOWN(&r);
    sf_resp_free(&r);
    /* Reads complete it, once. */
    int64_t until = tu_now_ms() + AO_THAW_MS;
    long long t;
    while ((t = stock_total(sku)) != AHEAD + UNITS && tu_now_ms() < until)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(t, AHEAD + UNITS);
    SF_ASSERT_EQ(rf_integer(gf_redis, "HLEN inv:2:{%s}:rst", sku), 0);
    SF_ASSERT_EQ(stock_total(sku), AHEAD + UNITS);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_sent_to_frozen_redis_are_unknown),
        cmocka_unit_test(test_restock_whose_settle_fails_is_unknown),
        cmocka_unit_test(test_restock_behind_many_pending_is_never_409),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
