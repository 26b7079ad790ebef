/*
 * Sale rules are versioned data (SPEC §11, issue 29 items 1 and 10; docs/design.md "The sale
 * rules' version"): a PATCH answered 200 holds for every order that starts after the answer, on
 * every instance, whatever that instance had cached. Against a real redis-server and two real
 * inventoryd processes A and B (--user-header X-User-Id --trusted-proxies 127.0.0.1/32), B's
 * cache warmed by an order before each PATCH, which goes through A:
 *   - PATCH limit_per_user 1: user u1's six orders through B at once after the answer, exactly
 *     one 201 and five 409 limit_exceeded; 1.2 s later still 409 (before: 201 x 5, then the
 *     orders the cache let through were never counted: 6 units for a limit of 1);
 *   - PATCH sale_end into the past: the next order through B is 409 sale_ended, a multi-segment
 *     one too (before: 201 until B re-read its rules); PATCHed back, B's next order sells (the
 *     window's early refusals come from B's copy: the opening PATCH is answered once every
 *     copy is stale; before, 409 sale_ended for up to sold_out_recheck_ms after it);
 *   - PATCH reservation_ttl_s 60: the next order through B is "reserved" with expires_at; PATCH
 *     back to 0: the next is "created" (before: "created", then "reserved").
 * Each on the in-commit limit path (one Redis, the default) and on --limit-two-step.
 * And the three on a Redis Cluster (the two-step path there).
 *   - segments ahead of the meta's rules version (a PATCH's meta write lost in a failover): the
 *     orders that find it give the rules a new version, and the SKU sells again.
 * About 15 s (the 1.2 s waits of the limit test, three times; a cluster's start).
 */
#include "svc_test.h"

#include "cluster_fixture.h"

#define RV_TOKEN "rules-version-token"

/* [0]: the default (limit checked in the commit), [1]: --limit-two-step. A and B each. */
static sf_service *svc_a[2], *svc_b[2];

static int group_setup(void **state)
{
    (void)state;
    for (int two = 0; two < 2; two++) {
        const char *args[] = {"--threads",
                              "2",
                              "--admin-token",
                              RV_TOKEN,
                              "--user-header",
                              "X-User-Id",
                              "--trusted-proxies",
                              "127.0.0.1/32",
                              two ? "--limit-two-step" : NULL,
                              NULL};
        if (!(svc_a[two] = sf_group_service(args)) || !(svc_b[two] = sf_group_service(args)))
            return -1;
    }
    return 0;
}

static void rv_put(int port, const char *sku, long long stock, int segments)
{
    char path[160], body[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld,\"segments\":%d}", stock, segments);
    sf_resp r = {0};
    sf_json_request(NULL, port, "PUT", path, RV_TOKEN, NULL, body, &r);
    SF_ASSERT(r.status == 201, "PUT %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

static void rv_patch(int port, const char *sku, const char *body)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, port, "PATCH", path, RV_TOKEN, NULL, body, &r);
    SF_ASSERT(r.status == 200, "PATCH %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* An order of qty units of sku as user (NULL: none) through port; the answer in *r. */
static void rv_order(int port, const char *sku, const char *user, long long qty, sf_resp *r)
{
    char body[200], hdr[100];
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":%lld}", sku, qty);
    snprintf(hdr, sizeof hdr, "X-User-Id: %s", user ? user : "");
    const char *headers[] = {"Content-Type: application/json", user ? hdr : NULL, NULL};
    sf_http(port, "POST", "/api/v1/orders", headers, body, strlen(body), r);
}

/* B's cache holds the SKU's layout and rules: an order through it (no user: a limit PATCHed
 * later counts the orders from its answer on, not this one). */
static void rv_warm(int port, const char *sku)
{
    sf_resp r = {0};
    rv_order(port, sku, NULL, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
}

/* The rules' PATCHes through A, orders through B (ports), the stock on redis_url; what names
 * the path in the log lines and SKU names. */
static void limit_patched(int a, int b, const char *redis_url, const char *what)
{
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rv-limit");
    rv_put(a, sku, 100, 2);
    rv_warm(b, sku);
    rv_patch(a, sku, "{\"limit_per_user\":1}");
    int created = 0, limited = 0;
    sf_resp r = {0};
    for (int i = 0; i < 6; i++) {
        rv_order(b, sku, "u1", 1, &r);
        if (r.status == 201)
            created++;
        else if (r.status == 409 && strcmp(sf_error_code(&r), "limit_exceeded") == 0 &&
                 sf_json_int(r.json, "limit_per_user", -1) == 1)
            limited++;
        else
            SF_ASSERT(0, "order %d of u1: %s", i, sf_resp_summary(&r));
    }
    fprintf(stderr, "%s: u1 through B after the PATCH: %d created, %d limit_exceeded\n", what,
            created, limited);
    SF_ASSERT(created == 1 && limited == 5, "u1 got %d units for a limit of 1", created);
    /* Past every cache's re-read of the rules: the one order counted, the user stays refused. */
    tu_sleep_ms(1200);
    for (int i = 0; i < 2; i++) {
        rv_order(i ? a : b, sku, "u1", 1, &r);
        SF_ASSERT(r.status == 409 && strcmp(sf_error_code(&r), "limit_exceeded") == 0, "%s",
                  sf_resp_summary(&r));
    }
    rv_order(b, sku, "u2", 1, &r); /* another user is not limited by u1's */
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(redis_url, sku, &rep);
    SF_ASSERT_EQ(rep.sold, 3); /* warm, u1, u2 */
}

static void window_patched(int a, int b, const char *redis_url)
{
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rv-window");
    rv_put(a, sku, 20, 2); /* 10 a segment: an order of 15 takes two */
    rv_warm(b, sku);
    rv_patch(a, sku, "{\"sale_end\":\"2020-01-01T00:00:00Z\"}");
    sf_resp r = {0};
    rv_order(b, sku, "u1", 15, &r);
    SF_ASSERT_ERROR(&r, 409, "sale_ended");
    rv_order(b, sku, "u1", 1, &r);
    SF_ASSERT_ERROR(&r, 409, "sale_ended");
    /* ... and back: B's refusals by the window came from its copy of the rules (the early
     * rush is answered without Redis, docs/design.md "The sale window"); the PATCH that opens
     * it is answered only once every such copy is stale, so B's next order sells (before: 409
     * sale_ended from B's copy for up to sold_out_recheck_ms after the answer) */
    rv_order(b, sku, "u1", 1, &r); /* B's copy: closed, read just now */
    SF_ASSERT_ERROR(&r, 409, "sale_ended");
    int64_t t0 = tu_now_ms();
    rv_patch(a, sku, "{\"sale_end\":null}");
    fprintf(stderr, "window_patched: the opening PATCH answered in %lld ms\n",
            (long long)(tu_now_ms() - t0));
    rv_order(b, sku, "u1", 15, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(redis_url, sku, &rep);
    SF_ASSERT_EQ(rep.sold, 16);
}

static void ttl_patched(int a, int b, const char *redis_url)
{
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rv-ttl");
    rv_put(a, sku, 50, 2);
    rv_warm(b, sku);
    rv_patch(a, sku, "{\"reservation_ttl_s\":60}");
    sf_resp r = {0};
    rv_order(b, sku, "u1", 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "reserved") == 0 &&
                  json_is_string(json_object_get(r.json, "expires_at")),
              "a hold after the TTL's PATCH: %s", sf_resp_summary(&r));
    rv_patch(a, sku, "{\"reservation_ttl_s\":0}");
    rv_order(b, sku, "u1", 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "created") == 0 &&
                  json_object_get(r.json, "expires_at") == NULL,
              "final at once after the TTL's PATCH to 0: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(redis_url, sku, &rep);
    SF_ASSERT_EQ(rep.sold, 3);
}

/* A PATCH whose meta write a failover lost while its segments kept the new rules version
 * (written here by hand: each segment's rver above the meta's): the first order is refused by
 * the commit, re-reads the rules, is refused again at the same version and gives the meta's
 * rules a version above the segments' (layout_note_rules_ahead); orders sell again, and the
 * rules as the meta holds them (the limit of the PUT) still hold. */
static void test_segment_rules_ahead(void **state)
{
    (void)state;
    char sku[64], meta_rver[32] = "";
    tu_unique_name(sku, sizeof sku, "rv-ahead");
    int b = sf_port(svc_b[0]);
    rv_put(b, sku, 20, 2);
    rv_warm(b, sku);
    SF_ASSERT(rf_string(gf_redis, meta_rver, sizeof meta_rver, "HGET inv:2:{%s}:meta rver", sku) ==
                  1,
              "%s", "the PUT wrote a rules version");
    long long ahead = atoll(meta_rver) + 1000000;
    for (int k = 0; k < 2; k++) {
        redisReply *x = rf_command(gf_redis, "SET inv:2:{%s/%d}:rver %lld", sku, k, ahead);
        SF_ASSERT(x && x->type == REDIS_REPLY_STATUS, "SET segment %d's rver", k);
        freeReplyObject(x);
    }
    sf_resp r = {0};
    int sold = 0, i;
    for (i = 0; i < 10 && !sold; i++) {
        rv_order(b, sku, "u1", 1, &r);
        SF_ASSERT(r.status == 201 || r.status == 503, "%s", sf_resp_summary(&r));
        sold = r.status == 201;
    }
    fprintf(stderr, "orders until the first sale: %d\n", i);
    SF_ASSERT(sold && i <= 3, "no sale in %d orders after the meta lost a PATCH", i);
    SF_ASSERT(rf_string(gf_redis, meta_rver, sizeof meta_rver, "HGET inv:2:{%s}:meta rver", sku) ==
                  1,
              "%s", "meta rver");
    SF_ASSERT(atoll(meta_rver) > ahead, "meta rver %s, segments at %lld", meta_rver, ahead);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

static void test_limit_patched_in_commit(void **state)
{
    (void)state;
    limit_patched(sf_port(svc_a[0]), sf_port(svc_b[0]), rf_url(gf_redis), "in-commit");
}

static void test_limit_patched_two_step(void **state)
{
    (void)state;
    limit_patched(sf_port(svc_a[1]), sf_port(svc_b[1]), rf_url(gf_redis), "two-step");
}

static void test_window_patched_in_commit(void **state)
{
    (void)state;
    window_patched(sf_port(svc_a[0]), sf_port(svc_b[0]), rf_url(gf_redis));
}

static void test_window_patched_two_step(void **state)
{
    (void)state;
    window_patched(sf_port(svc_a[1]), sf_port(svc_b[1]), rf_url(gf_redis));
}

static void test_ttl_patched_in_commit(void **state)
{
    (void)state;
    ttl_patched(sf_port(svc_a[0]), sf_port(svc_b[0]), rf_url(gf_redis));
}

static void test_ttl_patched_two_step(void **state)
{
    (void)state;
    ttl_patched(sf_port(svc_a[1]), sf_port(svc_b[1]), rf_url(gf_redis));
}

/* The same three on a Redis Cluster (3 masters: the SKU's meta and its segments on different
 * ones, the limit on the two-step path, a PATCH's push to every segment's master). ~8 s with
 * the cluster's start. */
static void test_patched_on_a_cluster(void **state)
{
    (void)state;
    cf_cluster *cl = cf_start(3, 0);
    SF_ASSERT(cl != NULL, "%s", "a Redis Cluster");
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    const char *args[] = {"--threads",
                          "2",
                          "--admin-token",
                          RV_TOKEN,
                          "--user-header",
                          "X-User-Id",
                          "--trusted-proxies",
                          "127.0.0.1/32",
                          NULL};
    sf_service *ab[2] = {sf_start(url, args), sf_start(url, args)};
    SF_ASSERT(ab[0] && ab[1], "%s", "two instances on the cluster");
    limit_patched(sf_port(ab[0]), sf_port(ab[1]), url, "cluster");
    window_patched(sf_port(ab[0]), sf_port(ab[1]), url);
    ttl_patched(sf_port(ab[0]), sf_port(ab[1]), url);
    SF_ASSERT(sf_stop_all(ab, 2) == 0, "%s", "the instances' exit");
    cf_stop(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_patched_in_commit),
        cmocka_unit_test(test_limit_patched_two_step),
        cmocka_unit_test(test_window_patched_in_commit),
        cmocka_unit_test(test_window_patched_two_step),
        cmocka_unit_test(test_ttl_patched_in_commit),
        cmocka_unit_test(test_ttl_patched_two_step),
        cmocka_unit_test(test_segment_rules_ahead),
        cmocka_unit_test(test_patched_on_a_cluster),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
