/*
 * One order per Idempotency-Key after a re-PUT with more segments (issue 18 item 3), with two
 * real inventoryd instances on one real redis-server:
 *   A has the SKU's old layout (1 segment) in its cache; B re-PUTs it with 4 segments, then an
 *   order with key K through B commits on segment 1, 2 or 3 (segment 0's lock is held by the
 *   test), and the test then puts K's claim back to "pending" and past its expiry, as B leaves
 *   it when it dies, or answers "outcome unknown", after the commit and before the claim is
 *   settled (first written with --redis-replica-acks 1 and no replica; since the claim itself
 *   is WAITed for, issue 18 item 4, that order is refused before it runs). The client retries
 *   with K through A: A must find the committed order (200, the same order id), not place a
 *   second one. Before the fix (34f3be8) A searched only the segments of its own cached layout
 *   (segment 0), took the key over and answered 201 with a second order.
 */
#include "svc_test.h"

#define IR_TOKEN "idem-reput-token"
#define IR_LOCK_WAIT_MS 300
#define IR_LEASE_MS 1000
#define IR_REDIS_TIMEOUT_MS 200

static sf_service *svc[2]; /* A and B */

static int group_setup(void **state)
{
    (void)state;
    char wait[16], lease[16], timeout[16];
    snprintf(wait, sizeof wait, "%d", IR_LOCK_WAIT_MS);
    snprintf(lease, sizeof lease, "%d", IR_LEASE_MS);
    snprintf(timeout, sizeof timeout, "%d", IR_REDIS_TIMEOUT_MS);
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--threads",
                              "2",
                              "--admin-token",
                              IR_TOKEN,
                              "--lock-wait-ms",
                              wait,
                              "--lock-lease-ms",
                              lease,
                              "--redis-timeout-ms",
                              timeout,
                              NULL};
        if (!(svc[i] = sf_group_service(args)))
            return -1;
    }
    return 0;
}

static void test_retry_on_stale_instance_finds_the_order(void **state)
{
    (void)state;
    int a = sf_port(svc[0]), b = sf_port(svc[1]);
    char sku[64], body[160];
    tu_unique_name(sku, sizeof sku, "irp");
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1}", sku);
    sf_resp r = {0};
    sf_put_sku(a, IR_TOKEN, sku, 10, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    /* A learns the 1-segment layout. */
    sf_order(NULL, a, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    /* B re-PUTs with more segments; nothing tells A. */
    sf_put_sku(b, IR_TOKEN, sku, 40, 4, &r);
    SF_ASSERT_STATUS(&r, 200);
    char segs[16] = "";
    rf_string(gf_redis, segs, sizeof segs, "HGET inv:2:{%s}:meta segments", sku);
    SF_ASSERT(strcmp(segs, "4") == 0, "meta segments %s after the re-PUT", segs);
    /* Segment 0 busy, so B's order lands on a segment A's cached layout does not have. */
    redisReply *x = rf_command(gf_redis, "HSET inv:2:{%s/0}:lock o test c 1 f 1", sku);
    freeReplyObject(x);
    x = rf_command(gf_redis, "PEXPIRE inv:2:{%s/0}:lock 60000", sku);
    freeReplyObject(x);
    sf_json_request(NULL, b, "POST", "/api/v1/orders", NULL, "key-1", body, &r);
    SF_ASSERT_STATUS(&r, 201);
    x = rf_command(gf_redis, "DEL inv:2:{%s/0}:lock", sku);
    freeReplyObject(x);
    char first[128] = "";
    for (int k = 1; k < 4 && !first[0]; k++)
        rf_string(gf_redis, first, sizeof first, "HGET inv:2:{%s/%d}:idem key-1", sku, k);
    SF_ASSERT(first[0] != '\0', "%s", "B's order was not committed on segment 1..3");
    /* K's claim as B leaves it when cut off between the commit and settling the claim:
     * pending, and expired 10 s ago on Redis's clock (past the take-over margin). */
    redisReply *t = rf_command(gf_redis, "TIME");
    SF_ASSERT(t != NULL && t->type == REDIS_REPLY_ARRAY && t->elements == 2, "%s", "TIME failed");
    long long now_ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    x = rf_command(gf_redis, "SET inv:2:{%s}:idem:key-1 pending:%lld:cut-off-token PX 86400000",
                   sku, now_ms - 10000);
    SF_ASSERT(x != NULL && x->type == REDIS_REPLY_STATUS, "%s", "SET of the claim failed");
    freeReplyObject(x);
    sf_json_request(NULL, a, "POST", "/api/v1/orders", NULL, "key-1", body, &r);
    SF_ASSERT(r.status == 200, "the retry through A: %s (B's order: %s)", sf_resp_summary(&r),
              first);
    SF_ASSERT(strcmp(sf_str(r.json, "order_id"), first) == 0, "replayed %s, committed %s",
              sf_str(r.json, "order_id"), first);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.orders, 1);
    SF_ASSERT_EQ(rep.sold, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_on_stale_instance_finds_the_order),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
