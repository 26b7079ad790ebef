/*
 * Failover (SPEC §1, §6 step 3): a SKU of 16 segments whose stock sits in segment 7 alone (the
 * others emptied by hand in Redis, their counters kept consistent). Every unit of segment 7
 * must be sold through the API, whatever segment each order starts at: no sold_out while
 * segment 7 still holds stock, then sold_out. Once one order at a time over two instances, and
 * once with eight concurrent buyers, each of whom checks Redis the moment it is told sold_out.
 */
#include "svc_test.h"

#include <pthread.h>

#define FO_SEGMENTS 16
#define FO_FULL 7 /* the one segment with stock */

static sf_service *svc[2];

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "8", NULL};
    for (int i = 0; i < 2; i++) {
        if (!(svc[i] = sf_group_service(args)))
            return -1;
    }
    return 0;
}

/* PUTs sku with per_segment units in each of 16 segments, then empties every segment but
 * FO_FULL directly in Redis, keeping t = stock + s so the invariants still hold. */
static void stock_only_in_full_segment(const char *sku, long long per_segment)
{
    sf_resp r = {0};
    sf_put_sku(sf_port(svc[0]), NULL, sku, per_segment * FO_SEGMENTS, FO_SEGMENTS, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    for (int k = 0; k < FO_SEGMENTS; k++) {
        if (k == FO_FULL)
            continue;
        redisReply *a = rf_command(gf_redis, "SET inv:2:{%s/%d}:stock 0", sku, k);
        redisReply *b = rf_command(gf_redis, "HSET inv:2:{%s/%d}:cnt t 0", sku, k);
        SF_ASSERT(a != NULL && b != NULL && a->type != REDIS_REPLY_ERROR &&
                      b->type != REDIS_REPLY_ERROR,
                  "emptying segment %d failed", k);
        freeReplyObject(a);
        freeReplyObject(b);
    }
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.remaining == per_segment && rep.seg_stock[FO_FULL] == per_segment,
              "set-up: remaining %lld, segment %d holds %lld", rep.remaining, FO_FULL,
              rep.seg_stock[FO_FULL]);
}

static long long segment_stock(const char *sku, int k)
{
    char buf[32];
    if (rf_string(gf_redis, buf, sizeof buf, "GET inv:2:{%s/%d}:stock", sku, k) != 1)
        return -999;
    return strtoll(buf, NULL, 10);
}

static double failovers(void)
{
    return sf_metric(sf_port(svc[0]), "inventory_failovers_total") +
           sf_metric(sf_port(svc[1]), "inventory_failovers_total");
}

static void test_sequential_orders_find_the_last_segment(void **state)
{
    (void)state;
    enum { UNITS = 25 };
    char sku[64];
    tu_unique_name(sku, sizeof sku, "failover");
    stock_only_in_full_segment(sku, UNITS);
    double f0 = failovers();

    sf_resp r = {0};
    for (int i = 0; i < UNITS; i++) {
        int p = sf_port(svc[i % 2]);
        sf_order(NULL, p, sku, 1, &r);
        if (r.status != 201)
            sf_fail_at(__FILE__, __LINE__, "unit not sold",
                       "order %d of %d (segment %d still holds %lld): %s", i + 1, UNITS, FO_FULL,
                       segment_stock(sku, FO_FULL), sf_resp_summary(&r));
        SF_ASSERT(sf_json_int(r.json, "segment", -1) == FO_FULL, "order from segment %lld: %s",
                  sf_json_int(r.json, "segment", -1), r.body);
    }
    for (int i = 0; i < 2; i++) {
        sf_order(NULL, sf_port(svc[i]), sku, 1, &r);
        SF_ASSERT_ERROR(&r, 409, "sold_out");
    }
    sf_resp_free(&r);
    /* The empty segments were tried and left: the walk really failed over. */
    double f1 = failovers();
    SF_ASSERT(f1 > f0, "inventory_failovers_total did not grow (%g -> %g)", f0, f1);

    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.sold == UNITS && rep.orders == UNITS && rep.remaining == 0 &&
                  rep.seg_sold[FO_FULL] == UNITS,
              "sold %lld orders %lld remaining %lld", rep.sold, rep.orders, rep.remaining);
}

#define FO_BUYERS 8

struct fo_buyer {
    int port;
    const char *sku;
    pthread_barrier_t *go;
    int sold, lock_timeouts, premature, wrong_segment, errors;
    long long left_at_sold_out; /* segment FO_FULL's stock read right after a sold_out */
    char err[300];
    pthread_t tid;
};

static void *buyer_run(void *arg)
{
    struct fo_buyer *b = arg;
    sf_conn *c = sf_conn_open(b->port, 15000);
    sf_resp r = {0};
    pthread_barrier_wait(b->go);
    for (int n = 0; n < 10000; n++) {
        int st = sf_order(c, 0, b->sku, 1, &r);
        const char *code = sf_error_code(&r);
        if (st == 201) {
            b->sold++;
            if (sf_json_int(r.json, "segment", -1) != FO_FULL)
                b->wrong_segment++;
        } else if (st == 409 && strcmp(code, "sold_out") == 0) {
            /* Stock only goes down: if it is above zero now, it was when the 409 was made. */
            b->left_at_sold_out = segment_stock(b->sku, FO_FULL);
            if (b->left_at_sold_out != 0)
                b->premature = 1;
            break;
        } else if (st == 503 && strcmp(code, "lock_timeout") == 0) {
            b->lock_timeouts++;
        } else {
            if (b->errors++ == 0)
                snprintf(b->err, sizeof b->err, "%s", sf_resp_summary(&r));
            break;
        }
    }
    sf_resp_free(&r);
    sf_conn_close(c);
    return NULL;
}

static void test_concurrent_buyers_drain_the_last_segment(void **state)
{
    (void)state;
    enum { UNITS = 120 };
    char sku[64];
    tu_unique_name(sku, sizeof sku, "failover-mt");
    stock_only_in_full_segment(sku, UNITS);

    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, FO_BUYERS);
    struct fo_buyer b[FO_BUYERS];
    for (int i = 0; i < FO_BUYERS; i++) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].port = sf_port(svc[i % 2]);
        b[i].sku = sku;
        b[i].go = &go;
        assert_int_equal(pthread_create(&b[i].tid, NULL, buyer_run, &b[i]), 0);
    }
    for (int i = 0; i < FO_BUYERS; i++)
        pthread_join(b[i].tid, NULL);
    pthread_barrier_destroy(&go);

    int sold = 0;
    for (int i = 0; i < FO_BUYERS; i++) {
        SF_ASSERT(b[i].errors == 0, "buyer %d: %s", i, b[i].err);
        SF_ASSERT(!b[i].premature, "buyer %d was told sold_out while segment %d held %lld", i,
                  FO_FULL, b[i].left_at_sold_out);
        SF_ASSERT(b[i].wrong_segment == 0, "buyer %d got %d orders from other segments", i,
                  b[i].wrong_segment);
        sold += b[i].sold;
    }
    SF_ASSERT(sold == UNITS, "the buyers got %d units, segment %d held %d", sold, FO_FULL, UNITS);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.sold == UNITS && rep.orders == UNITS && rep.remaining == 0,
              "sold %lld orders %lld remaining %lld", rep.sold, rep.orders, rep.remaining);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequential_orders_find_the_last_segment),
        cmocka_unit_test(test_concurrent_buyers_drain_the_last_segment),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
