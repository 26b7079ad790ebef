/*
 * metrics — lock-free process-global metrics and their Prometheus rendering; see metrics.h.
 * The histogram keeps per-bucket (non-cumulative) counts and its sum in nanoseconds as
 * integers, because C11 has no atomic add on doubles; the render accumulates the buckets.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "metrics.h"

#define HIST_BUCKETS 12 /* finite upper bounds; +Inf is one more slot */

static const double hist_bounds[HIST_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                 0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
static const char *const hist_labels[HIST_BUCKETS + 1] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",  "0.5",    "1",     "2.5",  "+Inf"};

static const char *const order_labels[METRICS_ORDER_RESULT_COUNT] = {
    [METRICS_ORDER_CREATED] = "created",
    [METRICS_ORDER_REPLAYED] = "replayed",
    [METRICS_ORDER_SOLD_OUT] = "sold_out",
    [METRICS_ORDER_INSUFFICIENT] = "insufficient_stock",
    [METRICS_ORDER_LOCK_TIMEOUT] = "lock_timeout",
    [METRICS_ORDER_UNAVAILABLE] = "unavailable",
    [METRICS_ORDER_INVALID] = "invalid",
    [METRICS_ORDER_UNKNOWN_SKU] = "unknown_sku",
};

static atomic_ullong m_orders[METRICS_ORDER_RESULT_COUNT];
static atomic_ullong m_sold_out_fast;
static atomic_ullong m_hist[HIST_BUCKETS + 1];
static atomic_ullong m_hist_sum_ns;
static atomic_ullong m_failovers;
static atomic_ullong m_lock_waits;
static atomic_ullong m_locks_lost;
static atomic_ullong m_redis_errors;
static atomic_long m_cs_in_flight;
static atomic_long m_cs_peak;
static atomic_long m_req_in_flight;
static atomic_ullong m_requests[5]; /* 1xx .. 5xx */

static void inc(atomic_ullong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static unsigned long long get(atomic_ullong *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void metrics_order(enum metrics_order_result r)
{
    if ((unsigned)r < METRICS_ORDER_RESULT_COUNT)
        inc(&m_orders[r]);
}

void metrics_sold_out_fast(void)
{
    inc(&m_sold_out_fast);
}

void metrics_lock_acquire_seconds(double s)
{
    if (!(s > 0)) /* negative and NaN */
        s = 0;
    size_t i = 0;
    while (i < HIST_BUCKETS && s > hist_bounds[i])
        i++;
    inc(&m_hist[i]);
    /* Clamp before converting so an absurd value cannot overflow the integer sum. */
    double ns = s < 1e9 ? s * 1e9 : 1e18;
    atomic_fetch_add_explicit(&m_hist_sum_ns, (unsigned long long)(ns + 0.5),
                              memory_order_relaxed);
}

void metrics_failover(void)
{
    inc(&m_failovers);
}

void metrics_lock_wait(void)
{
    inc(&m_lock_waits);
}

void metrics_lock_lost(void)
{
    inc(&m_locks_lost);
}

void metrics_redis_error(void)
{
    inc(&m_redis_errors);
}

void metrics_cs_enter(void)
{
    long now = atomic_fetch_add_explicit(&m_cs_in_flight, 1, memory_order_relaxed) + 1;
    long peak = atomic_load_explicit(&m_cs_peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&m_cs_peak, &peak, now, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

void metrics_cs_leave(void)
{
    atomic_fetch_sub_explicit(&m_cs_in_flight, 1, memory_order_relaxed);
}

long metrics_cs_peak(void)
{
    return atomic_load_explicit(&m_cs_peak, memory_order_relaxed);
}

void metrics_request_begin(void)
{
    atomic_fetch_add_explicit(&m_req_in_flight, 1, memory_order_relaxed);
}

void metrics_request_end(int http_status)
{
    atomic_fetch_sub_explicit(&m_req_in_flight, 1, memory_order_relaxed);
    int cls = http_status / 100;
    if (http_status < 100 || cls > 5)
        cls = 5;
    inc(&m_requests[cls - 1]);
}

/* Resident set size in bytes from /proc/self/statm, or -1 when unreadable. */
static long long resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long long size, resident;
    int n = fscanf(f, "%lld %lld", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (n != 2 || page <= 0)
        return -1;
    return resident * page;
}

static void counter(FILE *f, const char *name, const char *help, atomic_ullong *c)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, get(c));
}

static void gauge(FILE *f, const char *name, const char *help, long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, v);
}

char *metrics_render(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;

    fputs("# HELP inventory_orders_total Order requests by outcome.\n"
          "# TYPE inventory_orders_total counter\n",
          f);
    for (int i = 0; i < METRICS_ORDER_RESULT_COUNT; i++)
        fprintf(f, "inventory_orders_total{result=\"%s\"} %llu\n", order_labels[i],
                get(&m_orders[i]));
    counter(f, "inventory_orders_sold_out_fast_total",
            "409 sold_out answers served from the in-process sold-out cache, without Redis.",
            &m_sold_out_fast);

    fputs("# HELP inventory_lock_acquire_seconds Time to acquire a segment lock.\n"
          "# TYPE inventory_lock_acquire_seconds histogram\n",
          f);
    unsigned long long cum = 0;
    for (int i = 0; i <= HIST_BUCKETS; i++) {
        cum += get(&m_hist[i]);
        fprintf(f, "inventory_lock_acquire_seconds_bucket{le=\"%s\"} %llu\n", hist_labels[i],
                cum);
    }
    fprintf(f, "inventory_lock_acquire_seconds_sum %.9f\n", (double)get(&m_hist_sum_ns) / 1e9);
    fprintf(f, "inventory_lock_acquire_seconds_count %llu\n", cum);

    counter(f, "inventory_failovers_total", "Orders moved on from one segment to another.",
            &m_failovers);
    counter(f, "inventory_lock_waits_total", "Orders that waited for a busy segment lock.",
            &m_lock_waits);
    counter(f, "inventory_locks_lost_total",
            "Commits refused because the lock was lost or its fencing token was stale.",
            &m_locks_lost);
    counter(f, "inventory_redis_errors_total", "Redis connection and command errors.",
            &m_redis_errors);
    gauge(f, "inventory_requests_in_flight", "HTTP requests being handled.",
          atomic_load_explicit(&m_req_in_flight, memory_order_relaxed));

    fputs("# HELP inventory_requests_total HTTP requests by status class.\n"
          "# TYPE inventory_requests_total counter\n",
          f);
    for (int i = 0; i < 5; i++)
        fprintf(f, "inventory_requests_total{code=\"%dxx\"} %llu\n", i + 1, get(&m_requests[i]));

    gauge(f, "inventory_critical_sections_in_flight",
          "Orders inside a segment critical section now.",
          atomic_load_explicit(&m_cs_in_flight, memory_order_relaxed));
    gauge(f, "inventory_critical_sections_peak",
          "Most orders inside segment critical sections at once.", metrics_cs_peak());

    long long rss = resident_bytes();
    if (rss >= 0)
        gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.", rss);

    if (ferror(f)) {
        fclose(f);
        free(buf);
        return NULL;
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

void metrics_reset(void)
{
    for (int i = 0; i < METRICS_ORDER_RESULT_COUNT; i++)
        atomic_store(&m_orders[i], 0);
    for (int i = 0; i <= HIST_BUCKETS; i++)
        atomic_store(&m_hist[i], 0);
    for (int i = 0; i < 5; i++)
        atomic_store(&m_requests[i], 0);
    atomic_store(&m_sold_out_fast, 0);
    atomic_store(&m_hist_sum_ns, 0);
    atomic_store(&m_failovers, 0);
    atomic_store(&m_lock_waits, 0);
    atomic_store(&m_locks_lost, 0);
    atomic_store(&m_redis_errors, 0);
    atomic_store(&m_cs_in_flight, 0);
    atomic_store(&m_cs_peak, 0);
    atomic_store(&m_req_in_flight, 0);
}
