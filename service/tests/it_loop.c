/*
 * The worker event loops (docs/design.md "Threading: worker event loops"): a request that waits
 * on Redis or sits in its critical section parks no thread.
 *   - With --threads 1 and --hold-ms 300, sixteen concurrent orders on a SKU of 8 segments are
 *     inside their critical sections together (inventory_critical_sections_peak >= 2; a
 *     thread-per-request design with one thread would show 1), every one answered 201 or 503
 *     lock_timeout, and SPEC §8 holds.
 *   - SIGTERM while orders are suspended in their critical sections: they finish (201) within
 *     shutdown_grace_ms, and the process exits 0 (every suspended connection was resumed before
 *     its daemon stopped).
 * No timing is asserted: only answers, counts and the peak gauge.
 */
#include <pthread.h>
#include <unistd.h>

#include "svc_test.h"

#define LP_ORDERS 16
#define LP_SEGMENTS 8

struct lp_worker {
    int port;
    const char *sku;
    int status;
    char code[64];
    pthread_t tid;
};

static void *lp_order(void *arg)
{
    struct lp_worker *w = arg;
    sf_resp r = {0};
    w->status = sf_order(NULL, w->port, w->sku, 1, &r);
    snprintf(w->code, sizeof(w->code), "%s", sf_error_code(&r));
    sf_resp_free(&r);
    return NULL;
}

static void start_orders(struct lp_worker *w, int n, int port, const char *sku)
{
    for (int i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].port = port;
        w[i].sku = sku;
        assert_int_equal(pthread_create(&w[i].tid, NULL, lp_order, &w[i]), 0);
    }
}

static void test_one_thread_many_critical_sections(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--hold-ms", "300", "--lock-wait-ms", "5000", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64];
    snprintf(sku, sizeof(sku), "loop-%d-a", (int)getpid());
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 1000, LP_SEGMENTS, &r) / 100 == 2, "PUT: %s",
              sf_resp_summary(&r));
    struct lp_worker w[LP_ORDERS];
    start_orders(w, LP_ORDERS, port, sku);
    int created = 0;
    for (int i = 0; i < LP_ORDERS; i++) {
        pthread_join(w[i].tid, NULL);
        SF_ASSERT(w[i].status == 201 || (w[i].status == 503 && !strcmp(w[i].code, "lock_timeout")),
                  "order %d: HTTP %d %s", i, w[i].status, w[i].code);
        created += w[i].status == 201;
    }
    double peak = sf_metric(port, "inventory_critical_sections_peak");
    SF_ASSERT(peak >= 2, "one loop thread had at most %g critical section(s) at once", peak);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static void test_sigterm_finishes_suspended_orders(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--hold-ms", "800", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64];
    snprintf(sku, sizeof(sku), "loop-%d-b", (int)getpid());
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 100, 4, &r) / 100 == 2, "PUT: %s", sf_resp_summary(&r));
    struct lp_worker w[4];
    start_orders(w, 4, port, sku);
    /* Wait until at least one is inside its critical section (suspended on the loop). */
    for (int i = 0; i < 400 && sf_metric(port, "inventory_critical_sections_in_flight") < 1; i++)
        tu_sleep_ms(10);
    SF_ASSERT_EQ(sf_stop(svc), 0); /* SIGTERM, then the exit status */
    int created = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(w[i].tid, NULL);
        created += w[i].status == 201;
    }
    SF_ASSERT(created >= 1, "%s", "no order in its critical section finished after SIGTERM");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created);
    sf_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_thread_many_critical_sections),
        cmocka_unit_test(test_sigterm_finishes_suspended_orders),
    };
    return SF_RUN_GROUP_TESTS(tests, gf_group_setup, sf_group_teardown);
}
