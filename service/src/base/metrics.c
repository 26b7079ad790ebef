/*
 * metrics — lock-free process-global metrics and their Prometheus rendering; see metrics.h.
 * The histogram keeps per-bucket (non-cumulative) counts and its sum in nanoseconds as
 * integers, because C11 has no atomic add on doubles; the render accumulates the buckets.
 */
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"

#ifndef INVENTORYD_VERSION
#define INVENTORYD_VERSION "0.0.0" /* CMake defines the real one */
#endif

#define HIST_BUCKETS 12 /* finite upper bounds; +Inf is one more slot */

static const double hist_bounds[HIST_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                 0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
static const char *const hist_labels[HIST_BUCKETS + 1] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",  "0.5",    "1",     "2.5",  "+Inf"};

static const char *const order_labels[METRICS_ORDER_RESULT_COUNT] = {
#define METRICS_ORDER_LABEL(id, label) [METRICS_ORDER_##id] = label,
    METRICS_ORDER_RESULTS(METRICS_ORDER_LABEL)
#undef METRICS_ORDER_LABEL
};

const char *metrics_order_label(enum metrics_order_result r)
{
    return (unsigned)r < METRICS_ORDER_RESULT_COUNT ? order_labels[r] : "?";
}

/* One histogram: per-bucket (non-cumulative) counts, the last one +Inf, and the sum in ns. */
struct hist {
    atomic_ullong bucket[HIST_BUCKETS + 1];
    atomic_ullong sum_ns;
};

static atomic_ullong m_orders[METRICS_ORDER_RESULT_COUNT];
static atomic_ullong m_sold_out_fast;
static atomic_ullong m_status_answers[2]; /* 200/404 from the snapshot, 304 */
static atomic_ullong m_status_age_ms;     /* the sum of their snapshots' ages */
static atomic_ullong m_window_fast;
static atomic_ullong m_log_full;
static atomic_ullong m_multi_orders, m_multi_parts;
enum { HOLD_CONFIRMED, HOLD_EXPIRED, HOLD_CANCELLED, HOLD_EVENTS };
static const char *const hold_labels[HOLD_EVENTS] = {"confirmed", "expired", "cancelled"};
static atomic_ullong m_holds[HOLD_EVENTS];
static atomic_ullong m_hold_extensions;
static atomic_ullong m_part_follows;
static atomic_ullong m_multi_healed[2]; /* back, forward */
static struct hist m_lock_hist;
static struct hist m_http_hist[METRICS_ROUTES_MAX];
static atomic_ullong m_failovers;
static atomic_ullong m_user_rate_refused, m_user_rate_flushed, m_user_rate_flush_errors;
static atomic_ullong m_lock_waits;
static atomic_ullong m_locks_lost;
static atomic_ullong m_redis_errors;
static atomic_long m_cs_in_flight;
static atomic_long m_cs_peak;
static atomic_long m_req_in_flight;
static atomic_ullong m_requests[5]; /* 1xx .. 5xx */
static atomic_ullong m_order_calls;
static atomic_long m_order_calls_max;
static atomic_long m_order_call_budget;

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

void metrics_status_answer(int not_modified, int64_t age_ms)
{
    inc(&m_status_answers[not_modified ? 1 : 0]);
    atomic_fetch_add_explicit(&m_status_age_ms, (unsigned long long)(age_ms > 0 ? age_ms : 0),
                              memory_order_relaxed);
}

void metrics_sold_out_fast(void)
{
    inc(&m_sold_out_fast);
}

void metrics_order_log_full(void)
{
    inc(&m_log_full);
}

void metrics_multi_order(int parts)
{
    inc(&m_multi_orders);
    atomic_fetch_add_explicit(&m_multi_parts, (unsigned long long)(parts > 0 ? parts : 0),
                              memory_order_relaxed);
}

void metrics_sale_window_fast(void)
{
    inc(&m_window_fast);
}

void metrics_holds_expired(long long n)
{
    if (n > 0)
        atomic_fetch_add_explicit(&m_holds[HOLD_EXPIRED], (unsigned long long)n,
                                  memory_order_relaxed);
}

void metrics_hold_confirmed(void)
{
    inc(&m_holds[HOLD_CONFIRMED]);
}

void metrics_hold_cancelled(void)
{
    inc(&m_holds[HOLD_CANCELLED]);
}

void metrics_hold_extended(void)
{
    inc(&m_hold_extensions);
}

void metrics_part_follows(long long n)
{
    if (n > 0)
        atomic_fetch_add_explicit(&m_part_follows, (unsigned long long)n, memory_order_relaxed);
}

void metrics_multi_healed(int forward)
{
    inc(&m_multi_healed[forward ? 1 : 0]);
}

static void hist_observe(struct hist *h, double s)
{
    if (!(s > 0)) /* negative and NaN */
        s = 0;
    size_t i = 0;
    while (i < HIST_BUCKETS && s > hist_bounds[i])
        i++;
    inc(&h->bucket[i]);
    /* Clamp before converting so an absurd value cannot overflow the integer sum. */
    double ns = s < 1e9 ? s * 1e9 : 1e18;
    atomic_fetch_add_explicit(&h->sum_ns, (unsigned long long)(ns + 0.5), memory_order_relaxed);
}

static void hist_reset(struct hist *h)
{
    for (int i = 0; i <= HIST_BUCKETS; i++)
        atomic_store(&h->bucket[i], 0);
    atomic_store(&h->sum_ns, 0);
}

void metrics_lock_acquire_seconds(double s)
{
    hist_observe(&m_lock_hist, s);
}

void metrics_http_duration(int r, double s)
{
    if (r >= 0 && r < METRICS_ROUTES_MAX)
        hist_observe(&m_http_hist[r], s);
}

void metrics_order_redis_calls(long calls)
{
    if (calls <= 0)
        return;
    atomic_fetch_add_explicit(&m_order_calls, (unsigned long long)calls, memory_order_relaxed);
    long max = atomic_load_explicit(&m_order_calls_max, memory_order_relaxed);
    while (calls > max &&
           !atomic_compare_exchange_weak_explicit(&m_order_calls_max, &max, calls,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

void metrics_set_order_redis_call_budget(long budget)
{
    atomic_store_explicit(&m_order_call_budget, budget, memory_order_relaxed);
}

void metrics_failover(void)
{
    inc(&m_failovers);
}

void metrics_user_rate_refused(void)
{
    inc(&m_user_rate_refused);
}

void metrics_user_rate_flushed(long long n)
{
    if (n > 0)
        atomic_fetch_add_explicit(&m_user_rate_flushed, (unsigned long long)n,
                                  memory_order_relaxed);
}

void metrics_user_rate_flush_error(void)
{
    inc(&m_user_rate_flush_errors);
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
    while (now > peak && !atomic_compare_exchange_weak_explicit(
                             &m_cs_peak, &peak, now, memory_order_relaxed, memory_order_relaxed))
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

/* Open file descriptors (entries of /proc/self/fd less the one reading it), or -1. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long long n = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

/* The process's start as seconds since the epoch: its start in clock ticks after boot
 * (/proc/self/stat field 22) plus the boot time (/proc/stat btime). -1 when unreadable. */
static double start_time_seconds(void)
{
    static _Atomic double cached = -1;
    double c = atomic_load(&cached);
    if (c >= 0)
        return c;
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')': fields resume after the last ')'. */
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ticks = 0;
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ' && ++field == 22)
            ticks = strtoull(p + 1, NULL, 10);
    unsigned long long btime = 0;
    f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "btime ", 6) == 0)
            btime = strtoull(line + 6, NULL, 10);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (field < 22 || btime == 0 || hz <= 0)
        return -1;
    c = (double)btime + (double)ticks / (double)hz;
    atomic_store(&cached, c);
    return c;
}

/* Renders histogram h as name{labels,le="..."} lines (labels: "" or e.g. route="/x"). */
static void hist_render(FILE *f, const char *name, const char *labels, struct hist *h)
{
    const char *sep = labels[0] ? "," : "";
    unsigned long long cum = 0;
    for (int i = 0; i <= HIST_BUCKETS; i++) {
        cum += get(&h->bucket[i]);
        fprintf(f, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep, hist_labels[i], cum);
    }
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    fprintf(f, "%s_sum%s%s%s %.9f\n", name, open, labels, close, (double)get(&h->sum_ns) / 1e9);
    fprintf(f, "%s_count%s%s%s %llu\n", name, open, labels, close, cum);
}

void metrics_text_counter(FILE *f, const char *name, const char *help, unsigned long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

void metrics_text_gauge(FILE *f, const char *name, const char *help, double v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void counter(FILE *f, const char *name, const char *help, atomic_ullong *c)
{
    metrics_text_counter(f, name, help, get(c));
}

static void gauge(FILE *f, const char *name, const char *help, long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, v);
}

/* The status snapshot answers' series (SPEC §15). */
static void render_status(FILE *f)
{
    fputs("# HELP inventory_status_answers_total Status reads answered from the snapshot "
          "(GET /api/v1/skus/{sku}), by answer: full (200, or 404 for an unknown SKU) or "
          "not_modified (304).\n"
          "# TYPE inventory_status_answers_total counter\n",
          f);
    fprintf(f, "inventory_status_answers_total{answer=\"full\"} %llu\n", get(&m_status_answers[0]));
    fprintf(f, "inventory_status_answers_total{answer=\"not_modified\"} %llu\n",
            get(&m_status_answers[1]));
    fprintf(f,
            "# HELP inventory_status_answer_age_seconds_total Sum of the ages of the snapshots "
            "status reads were answered from (over inventory_status_answers_total: the mean "
            "age).\n# TYPE inventory_status_answer_age_seconds_total counter\n"
            "inventory_status_answer_age_seconds_total %.3f\n",
            (double)get(&m_status_age_ms) / 1000.0);
}

/* The usual process_* series. */
static void render_process(FILE *f)
{
    long long rss = resident_bytes();
    if (rss >= 0)
        gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.", rss);
    double start = start_time_seconds();
    if (start >= 0)
        fprintf(f,
                "# HELP process_start_time_seconds Start time of the process since unix epoch "
                "in seconds.\n# TYPE process_start_time_seconds gauge\n"
                "process_start_time_seconds %.2f\n",
                start);
    long long fds = open_fds();
    if (fds >= 0)
        gauge(f, "process_open_fds", "Number of open file descriptors.", fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        gauge(f, "process_max_fds", "Maximum number of open file descriptors.",
              (long long)rl.rlim_cur);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        fprintf(f,
                "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                "process_cpu_seconds_total %.6f\n",
                (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
}

/* The per-user request rate's counters (userrate.h). */
static void render_user_rate(FILE *f)
{
    counter(f, "inventory_user_rate_refused_total",
            "Requests refused 429 rate_limited by the per-user rate (--user-rps).",
            &m_user_rate_refused);
    counter(f, "inventory_user_rate_flushed_total",
            "Users' request counts sent to Redis by the per-user rate's flusher.",
            &m_user_rate_flushed);
    counter(f, "inventory_user_rate_flush_errors_total",
            "Counts of the per-user rate that Redis did not take (lost: the limit is lenient).",
            &m_user_rate_flush_errors);
}

char *metrics_render(metrics_label_fn route_label)
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
    render_status(f);
    counter(f, "inventory_orders_sold_out_fast_total",
            "409 sold_out answers served from the in-process sold-out cache, without Redis.",
            &m_sold_out_fast);
    counter(f, "inventory_multi_segment_orders_total",
            "Orders served from several segments (no one segment held the quantity).",
            &m_multi_orders);
    counter(f, "inventory_multi_segment_parts_total",
            "Parts (segments) of the orders served from several segments.", &m_multi_parts);
    counter(f, "inventory_order_log_full_total",
            "Commits a segment refused because its order log held --order-log-cap entries "
            "(inventory-sink is behind): nothing was written.",
            &m_log_full);
    counter(f, "inventory_orders_sale_window_fast_total",
            "409 sale_not_started / sale_ended answers served from this instance's estimate of "
            "Redis's clock, without Redis.",
            &m_window_fast);
    fputs("# HELP inventory_holds_total Holds (orders of a SKU with a reservation TTL) that ended, "
          "by how.\n"
          "# TYPE inventory_holds_total counter\n",
          f);
    for (int i = 0; i < HOLD_EVENTS; i++)
        fprintf(f, "inventory_holds_total{event=\"%s\"} %llu\n", hold_labels[i], get(&m_holds[i]));
    counter(f, "inventory_hold_extensions_total",
            "Holds extended by this instance (extend.lua moved the expiry).", &m_hold_extensions);
    counter(f, "inventory_part_follows_total",
            "Parts of multi-segment orders that took their primary's change (cancelled, "
            "expired, confirmed), applied by this instance.",
            &m_part_follows);
    fputs("# HELP inventory_multi_healed_total Intents of multi-segment orders and carts cut off "
          "while being made, healed by this instance's sweeper: forward (the order was whole) or "
          "back (its parts undone).\n"
          "# TYPE inventory_multi_healed_total counter\n",
          f);
    fprintf(f, "inventory_multi_healed_total{way=\"forward\"} %llu\n", get(&m_multi_healed[1]));
    fprintf(f, "inventory_multi_healed_total{way=\"back\"} %llu\n", get(&m_multi_healed[0]));

    fputs("# HELP inventory_lock_acquire_seconds Time to acquire a segment lock.\n"
          "# TYPE inventory_lock_acquire_seconds histogram\n",
          f);
    hist_render(f, "inventory_lock_acquire_seconds", "", &m_lock_hist);

    fputs("# HELP inventory_http_request_duration_seconds Time from a request's first byte to "
          "its response being queued, by route.\n"
          "# TYPE inventory_http_request_duration_seconds histogram\n",
          f);
    for (int r = 0; r < METRICS_ROUTES_MAX; r++) {
        const char *label = route_label(r);
        if (!label)
            continue;
        char labels[96];
        snprintf(labels, sizeof(labels), "route=\"%s\"", label);
        hist_render(f, "inventory_http_request_duration_seconds", labels, &m_http_hist[r]);
    }

    counter(f, "inventory_failovers_total", "Orders moved on from one segment to another.",
            &m_failovers);
    counter(f, "inventory_lock_waits_total", "Orders that waited for a busy segment lock.",
            &m_lock_waits);
    render_user_rate(f);
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
    counter(f, "inventory_order_redis_calls_total",
            "Redis calls made by orders (commands, scripts, lock attempts).", &m_order_calls);
    gauge(f, "inventory_order_redis_calls_max", "Most Redis calls any one order made.",
          atomic_load_explicit(&m_order_calls_max, memory_order_relaxed));
    gauge(f, "inventory_order_redis_call_budget",
          "Most Redis calls one order may make (order_redis_call_budget).",
          atomic_load_explicit(&m_order_call_budget, memory_order_relaxed));

    fprintf(f,
            "# HELP inventory_build_info The version of inventoryd; the value is always 1.\n"
            "# TYPE inventory_build_info gauge\n"
            "inventory_build_info{version=\"%s\"} 1\n",
            INVENTORYD_VERSION);

    render_process(f);

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
    hist_reset(&m_lock_hist);
    for (int r = 0; r < METRICS_ROUTES_MAX; r++)
        hist_reset(&m_http_hist[r]);
    for (int i = 0; i < 5; i++)
        atomic_store(&m_requests[i], 0);
    atomic_store(&m_sold_out_fast, 0);
    for (int i = 0; i < 2; i++)
        atomic_store(&m_status_answers[i], 0);
    atomic_store(&m_status_age_ms, 0);
    atomic_store(&m_window_fast, 0);
    atomic_store(&m_log_full, 0);
    atomic_store(&m_multi_orders, 0);
    atomic_store(&m_multi_parts, 0);
    for (int i = 0; i < HOLD_EVENTS; i++)
        atomic_store(&m_holds[i], 0);
    atomic_store(&m_hold_extensions, 0);
    atomic_store(&m_part_follows, 0);
    atomic_store(&m_multi_healed[0], 0);
    atomic_store(&m_multi_healed[1], 0);
    atomic_store(&m_failovers, 0);
    atomic_store(&m_user_rate_refused, 0);
    atomic_store(&m_user_rate_flushed, 0);
    atomic_store(&m_user_rate_flush_errors, 0);
    atomic_store(&m_lock_waits, 0);
    atomic_store(&m_locks_lost, 0);
    atomic_store(&m_redis_errors, 0);
    atomic_store(&m_cs_in_flight, 0);
    atomic_store(&m_cs_peak, 0);
    atomic_store(&m_req_in_flight, 0);
    atomic_store(&m_order_calls, 0);
    atomic_store(&m_order_calls_max, 0);
}
