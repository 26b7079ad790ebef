/*
 * Unit tests of service/src/base/metrics.c: the rendered Prometheus document holds every series
 * with the right values after increments, histogram buckets are cumulative with _count == +Inf, the
 * critical-section peak tracks the highest concurrency (also under threads), and
 * metrics_reset zeroes everything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <pthread.h>

#include "metrics.h"
#include "router.h"

static int reset(void **state)
{
    (void)state;
    metrics_reset();
    return 0;
}

/* The value of the sample line "<series> <value>" in doc; fails when absent. */
static double sample(const char *doc, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = doc; (p = strstr(p, series)) != NULL; p += n) {
        if ((p == doc || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    fail_msg("series %s not in the document", series);
    return -1;
}

static void test_orders_and_counters(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        metrics_order(METRICS_ORDER_CREATED);
    metrics_order(METRICS_ORDER_REPLAYED);
    metrics_order(METRICS_ORDER_SOLD_OUT);
    metrics_order(METRICS_ORDER_SOLD_OUT);
    metrics_order(METRICS_ORDER_INSUFFICIENT);
    metrics_order(METRICS_ORDER_LOCK_TIMEOUT);
    metrics_order(METRICS_ORDER_UNAVAILABLE);
    metrics_order(METRICS_ORDER_INVALID);
    metrics_order(METRICS_ORDER_UNKNOWN_SKU);
    metrics_order(METRICS_ORDER_RESULT_COUNT); /* ignored */
    metrics_order((enum metrics_order_result) - 1);
    metrics_sold_out_fast();
    metrics_failover();
    metrics_failover();
    metrics_lock_wait();
    metrics_lock_lost();
    metrics_redis_error();
    metrics_redis_error();
    metrics_redis_error();
    metrics_order_redis_calls(2);
    metrics_order_redis_calls(7);
    metrics_order_redis_calls(3);
    metrics_set_order_redis_call_budget(256);

    char *doc = metrics_render(router_label);
    assert_non_null(doc);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"created\"}"), 3);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"replayed\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"sold_out\"}"), 2);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"insufficient_stock\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"lock_timeout\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"unavailable\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"invalid\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"unknown_sku\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_orders_sold_out_fast_total"), 1);
    assert_int_equal((int)sample(doc, "inventory_failovers_total"), 2);
    assert_int_equal((int)sample(doc, "inventory_lock_waits_total"), 1);
    assert_int_equal((int)sample(doc, "inventory_locks_lost_total"), 1);
    assert_int_equal((int)sample(doc, "inventory_redis_errors_total"), 3);
    assert_int_equal((int)sample(doc, "inventory_order_redis_calls_total"), 12);
    assert_int_equal((int)sample(doc, "inventory_order_redis_calls_max"), 7);
    assert_int_equal((int)sample(doc, "inventory_order_redis_call_budget"), 256);
    free(doc);
}

static void test_format(void **state)
{
    (void)state;
    char *doc = metrics_render(router_label);
    assert_non_null(doc);
    size_t len = strlen(doc);
    assert_true(len > 0 && doc[len - 1] == '\n');
    const char *families[] = {
        "inventory_orders_total counter",
        "inventory_orders_sold_out_fast_total counter",
        "inventory_lock_acquire_seconds histogram",
        "inventory_failovers_total counter",
        "inventory_lock_waits_total counter",
        "inventory_locks_lost_total counter",
        "inventory_redis_errors_total counter",
        "inventory_requests_in_flight gauge",
        "inventory_requests_total counter",
        "inventory_critical_sections_in_flight gauge",
        "inventory_critical_sections_peak gauge",
        "inventory_order_redis_calls_total counter",
        "inventory_order_redis_calls_max gauge",
        "inventory_order_redis_call_budget gauge",
        "process_resident_memory_bytes gauge",
        "inventory_http_request_duration_seconds histogram",
        "inventory_build_info gauge",
        "process_start_time_seconds gauge",
        "process_open_fds gauge",
        "process_max_fds gauge",
        "process_cpu_seconds_total counter",
    };
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char type[128], help[128];
        snprintf(type, sizeof(type), "\n# TYPE %s\n", families[i]);
        snprintf(help, sizeof(help), "# HELP %.*s ", (int)strcspn(families[i], " "), families[i]);
        if (!strstr(doc, type) && strncmp(doc, type + 1, strlen(type + 1)) != 0)
            fail_msg("missing %s", type);
        assert_non_null(strstr(doc, help));
    }
    /* Every line is a comment or "name[{labels}] value". */
    char *copy = strdup(doc), *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == '#') {
            assert_true(strncmp(l, "# HELP ", 7) == 0 || strncmp(l, "# TYPE ", 7) == 0);
            continue;
        }
        char *sp = strrchr(l, ' ');
        assert_non_null(sp);
        char *end;
        strtod(sp + 1, &end);
        assert_int_equal(*end, '\0');
    }
    free(copy);
    assert_true(sample(doc, "process_resident_memory_bytes") > 0);
    free(doc);
}

static void test_histogram_cumulative(void **state)
{
    (void)state;
    metrics_lock_acquire_seconds(0.0003); /* <= 0.0005 */
    metrics_lock_acquire_seconds(0.0005); /* == bound: in le="0.0005" */
    metrics_lock_acquire_seconds(0.003);  /* <= 0.005 */
    metrics_lock_acquire_seconds(0.2);    /* <= 0.25 */
    metrics_lock_acquire_seconds(3.0);    /* +Inf only */
    metrics_lock_acquire_seconds(-1.0);   /* counted as 0 */

    char *doc = metrics_render(router_label);
    assert_non_null(doc);
    static const struct {
        const char *le;
        int count;
    } want[] = {{"0.0005", 3}, {"0.001", 3}, {"0.0025", 3}, {"0.005", 4}, {"0.01", 4},
                {"0.025", 4},  {"0.05", 4},  {"0.1", 4},    {"0.25", 5},  {"0.5", 5},
                {"1", 5},      {"2.5", 5},   {"+Inf", 6}};
    double prev = 0;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char series[96];
        snprintf(series, sizeof(series), "inventory_lock_acquire_seconds_bucket{le=\"%s\"}",
                 want[i].le);
        double v = sample(doc, series);
        assert_int_equal((int)v, want[i].count);
        assert_true(v >= prev);
        prev = v;
    }
    assert_int_equal((int)sample(doc, "inventory_lock_acquire_seconds_count"), 6);
    double sum = sample(doc, "inventory_lock_acquire_seconds_sum");
    assert_true(sum > 3.2037 && sum < 3.2039);
    free(doc);
}

static void test_requests(void **state)
{
    (void)state;
    metrics_request_begin();
    metrics_request_begin();
    metrics_request_begin();
    char *doc = metrics_render(router_label);
    assert_int_equal((int)sample(doc, "inventory_requests_in_flight"), 3);
    free(doc);
    metrics_request_end(200);
    metrics_request_end(201);
    metrics_request_end(404);
    metrics_request_begin();
    metrics_request_end(503);
    metrics_request_begin();
    metrics_request_end(302);
    metrics_request_begin();
    metrics_request_end(0); /* nonsense counts as 5xx */
    doc = metrics_render(router_label);
    assert_int_equal((int)sample(doc, "inventory_requests_in_flight"), 0);
    assert_int_equal((int)sample(doc, "inventory_requests_total{code=\"1xx\"}"), 0);
    assert_int_equal((int)sample(doc, "inventory_requests_total{code=\"2xx\"}"), 2);
    assert_int_equal((int)sample(doc, "inventory_requests_total{code=\"3xx\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_requests_total{code=\"4xx\"}"), 1);
    assert_int_equal((int)sample(doc, "inventory_requests_total{code=\"5xx\"}"), 2);
    free(doc);
}

static void test_peak(void **state)
{
    (void)state;
    assert_int_equal(metrics_cs_peak(), 0);
    metrics_cs_enter();
    metrics_cs_enter();
    assert_int_equal(metrics_cs_peak(), 2);
    metrics_cs_leave();
    metrics_cs_enter();
    assert_int_equal(metrics_cs_peak(), 2);
    metrics_cs_enter();
    assert_int_equal(metrics_cs_peak(), 3);
    metrics_cs_leave();
    metrics_cs_leave();
    metrics_cs_leave();
    char *doc = metrics_render(router_label);
    assert_int_equal((int)sample(doc, "inventory_critical_sections_in_flight"), 0);
    assert_int_equal((int)sample(doc, "inventory_critical_sections_peak"), 3);
    free(doc);
}

#define THREADS 8
#define ROUNDS 20000

static pthread_barrier_t barrier;

static void *cs_worker(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < ROUNDS; i++) {
        metrics_cs_enter();
        metrics_order(METRICS_ORDER_CREATED);
        metrics_lock_acquire_seconds(0.001);
        metrics_cs_leave();
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, cs_worker, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
    long peak = metrics_cs_peak();
    assert_true(peak >= 1 && peak <= THREADS);
    char *doc = metrics_render(router_label);
    assert_int_equal((long)sample(doc, "inventory_critical_sections_in_flight"), 0);
    assert_int_equal((long)sample(doc, "inventory_orders_total{result=\"created\"}"),
                     THREADS * ROUNDS);
    assert_int_equal((long)sample(doc, "inventory_lock_acquire_seconds_bucket{le=\"0.001\"}"),
                     THREADS * ROUNDS);
    assert_int_equal((long)sample(doc, "inventory_lock_acquire_seconds_count"), THREADS * ROUNDS);
    free(doc);
}

static void test_reset(void **state)
{
    (void)state;
    metrics_order(METRICS_ORDER_CREATED);
    metrics_lock_acquire_seconds(0.01);
    metrics_cs_enter();
    metrics_cs_leave();
    metrics_request_begin();
    metrics_request_end(200);
    metrics_reset();
    assert_int_equal(metrics_cs_peak(), 0);
    char *doc = metrics_render(router_label);
    assert_int_equal((int)sample(doc, "inventory_orders_total{result=\"created\"}"), 0);
    assert_int_equal((int)sample(doc, "inventory_lock_acquire_seconds_count"), 0);
    assert_true(sample(doc, "inventory_lock_acquire_seconds_sum") == 0.0);
    assert_int_equal((int)sample(doc, "inventory_requests_total{code=\"2xx\"}"), 0);
    free(doc);
}

/* The request-duration histogram: one set of buckets per route, each cumulative, its _count
 * the number of requests of that route; process_start_time_seconds is a time of this run. */
static void test_http_duration(void **state)
{
    (void)state;
    struct router_route orders, sku;
    router_match(HTTP_POST, "/api/v1/orders", &orders);
    router_match(HTTP_GET, "/api/v1/skus/a", &sku);
    metrics_http_duration(orders.label, 0.0002);
    metrics_http_duration(orders.label, 0.003);
    metrics_http_duration(orders.label, 7.0);
    metrics_http_duration(sku.label, 0.02);
    metrics_http_duration(METRICS_ROUTES_MAX, 1.0); /* ignored */
    metrics_http_duration(-1, 1.0);                 /* ignored */
    char *doc = metrics_render(router_label);
    assert_non_null(doc);
    const char *o = "inventory_http_request_duration_seconds_bucket{route=\"/api/v1/orders\",";
    char series[160];
    snprintf(series, sizeof(series), "%sle=\"0.0005\"}", o);
    assert_int_equal((int)sample(doc, series), 1);
    snprintf(series, sizeof(series), "%sle=\"0.005\"}", o);
    assert_int_equal((int)sample(doc, series), 2);
    snprintf(series, sizeof(series), "%sle=\"+Inf\"}", o);
    assert_int_equal((int)sample(doc, series), 3);
    assert_int_equal(
        (int)sample(doc, "inventory_http_request_duration_seconds_count{route=\"/api/v1/orders\"}"),
        3);
    assert_int_equal(
        (int)sample(doc,
                    "inventory_http_request_duration_seconds_count{route=\"/api/v1/skus/{sku}\"}"),
        1);
    assert_int_equal(
        (int)sample(doc, "inventory_http_request_duration_seconds_count{route=\"other\"}"), 0);
    assert_int_equal((int)sample(doc, "inventory_build_info{version=\"" INVENTORYD_VERSION "\"}"),
                     1);
    double start = sample(doc, "process_start_time_seconds");
    assert_true(start > 1.6e9 && start <= (double)time(NULL) + 1);
    assert_true(sample(doc, "process_open_fds") >= 3);
    free(doc);
    metrics_reset();
    doc = metrics_render(router_label);
    assert_int_equal(
        (int)sample(doc, "inventory_http_request_duration_seconds_count{route=\"/api/v1/orders\"}"),
        0);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_orders_and_counters, reset),
        cmocka_unit_test_setup(test_format, reset),
        cmocka_unit_test_setup(test_histogram_cumulative, reset),
        cmocka_unit_test_setup(test_requests, reset),
        cmocka_unit_test_setup(test_peak, reset),
        cmocka_unit_test_setup(test_concurrent, reset),
        cmocka_unit_test_setup(test_reset, reset),
        cmocka_unit_test_setup(test_http_duration, reset),
    };
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
